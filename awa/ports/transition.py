"""The storage transition as the routing engine sees it (ADR 0007).

:class:`TransitionStateReader` reads the state a cluster is in and where producers write;
:class:`TransitionUpkeep` is the two writes the routing engine itself makes (a fresh
install goes straight to queue storage; waiting canonical jobs move over). The steps
operators take (``prepare``, ``enter-mixed-transition``, ``finalize``, ``abort``) are not
here: they belong to the CLI and the store. :class:`TransitionFollower` is what a client
asks of an engine that follows the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from awa.domain.transition import (
    DEFAULT_SCHEMA,
    TransitionObservation,
    TransitionRole,
    TransitionStatus,
)

C_contra = TypeVar("C_contra", contravariant=True)


class TransitionStateReader(Protocol[C_contra]):
    """Reads of the transition state; ``C_contra`` is the store's transaction handle."""

    async def read_status(self) -> TransitionStatus:
        """The current status, read now (no lock taken)."""
        ...

    async def producer_schema(self, conn: C_contra) -> str | None:
        """Where a producer in the open transaction ``conn`` must write new jobs: the
        queue-storage schema, or ``None`` for canonical storage. Holds the producers' share
        of the transition lock until ``conn`` ends, so no step passes the insert; a
        transaction not begun yet is begun first."""
        ...

    async def canonical_job_ids(self, job_ids: Sequence[int]) -> set[int]:
        """Which of ``job_ids`` canonical storage holds, in any state (the others, if they
        exist, are in queue storage: both engines draw ids from one sequence)."""
        ...

    async def queue_storage_installed(self, schema: str) -> bool:
        """Whether ``schema`` holds the queue-storage tables."""
        ...

    async def observe_transition(self) -> TransitionObservation:
        """What operators watch (:class:`~awa.ports.storage.TransitionObserver`): the
        status, the canonical backlog while it gates a step, whether the target schema is
        installed and the live runtimes by capability."""
        ...


class TransitionUpkeep(Protocol):
    """The transition writes the routing engine makes on its own."""

    async def activate_if_fresh(self, schema: str = DEFAULT_SCHEMA) -> bool:
        """Make queue storage in ``schema`` the active engine when canonical storage
        holds nothing yet (no job, no DLQ entry, no live runtime); whether it did."""
        ...

    async def move_canonical_backlog(self, *, limit: int) -> int:
        """Move up to ``limit`` waiting (available, scheduled, retryable) canonical jobs
        into queue storage with their ids, oldest ``run_at`` first; does nothing unless
        producers already write to queue storage. Returns how many moved."""
        ...


class TransitionStore(TransitionStateReader[C_contra], TransitionUpkeep, Protocol[C_contra]):
    """Everything the routing engine reads and writes of the transition state."""


class TransitionFollower(Protocol):
    """An engine that follows the transition state (the routing engine)."""

    @property
    def transition_role(self) -> TransitionRole:
        """The role bound by :meth:`bind_transition_role` (``auto`` until then)."""
        ...

    @property
    def storage_capability(self) -> str:
        """What a runtime on this engine reports in ``awa.runtime_instances``."""
        ...

    async def bind_transition_role(self, role: TransitionRole | str) -> TransitionStatus:
        """Fix the role of the runtime using this engine (what it claims and reports)
        and, for a role that can run queue storage, move a fresh install straight to
        ``active``. Returns the status read afterwards."""
        ...

    async def status(self, *, max_age: float | None = None) -> TransitionStatus:
        """The status, read again when the cached one is older than ``max_age`` seconds
        (default: the engine's refresh interval)."""
        ...
