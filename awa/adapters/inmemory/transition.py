"""The storage-transition state of an in-memory store (routing(inmemory, inmemory)).

:class:`InMemoryTransition` is the :class:`~awa.ports.transition.TransitionStore` the
routing engine reads, and it takes the operators' steps through the domain's gates
(:mod:`awa.domain.transition`), as the SQL functions of migration 0200 do on Postgres.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from awa.adapters.inmemory.store import CANONICAL_SIDE, SharedStore, queue_storage_side
from awa.adapters.inmemory.transactions import InMemoryTransaction
from awa.domain import transition as machine
from awa.domain.channels import queue_channel
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.domain.transition import (
    DEFAULT_SCHEMA,
    QUEUE_STORAGE_ENGINE,
    RuntimeView,
    TransitionObservation,
    TransitionStatus,
)
from awa.ports.clock import Clock

#: Canonical jobs the backlog move takes (waiting, not running or terminal).
_WAITING = frozenset({JobState.Available, JobState.Scheduled, JobState.Retryable})


class InMemoryTransition:
    """The transition status of ``store``, starting at ``canonical``. Every in-memory
    schema counts as installed."""

    def __init__(self, store: SharedStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        store.transition = TransitionStatus()

    @property
    def _status(self) -> TransitionStatus:
        status = self._store.transition
        assert status is not None
        return status

    def _set(self, status: TransitionStatus) -> TransitionStatus:
        self._store.transition = status
        return status

    def _jobs(self, side: str) -> list[JobRecord]:
        return list(self._store.state.sides.get(side, {}).values())

    # ---------------------------------------------------------------- reads
    async def read_status(self) -> TransitionStatus:
        return self._status

    async def producer_schema(self, conn: InMemoryTransaction) -> str | None:
        # Steps are taken between calls, never inside a transaction: nothing to lock.
        return self._status.producer_schema

    async def canonical_job_ids(self, job_ids: Sequence[int]) -> set[int]:
        held = self._store.state.sides.get(CANONICAL_SIDE, {})
        return {job_id for job_id in job_ids if job_id in held}

    async def queue_storage_installed(self, schema: str) -> bool:
        return True

    async def observe_transition(self) -> TransitionObservation:
        # No runtime registry here: an in-memory store has no runtimes to count.
        status = self._status
        return TransitionObservation(
            status=status,
            canonical_backlog=self._canonical_backlog()
            if machine.backlog_matters(status.state)
            else None,
            schema_installed=True,
        )

    def _canonical_backlog(self) -> int:
        return sum(1 for job in self._jobs(CANONICAL_SIDE) if not job.state.is_terminal)

    # ---------------------------------------------------------------- upkeep
    async def activate_if_fresh(self, schema: str = DEFAULT_SCHEMA) -> bool:
        before = self._status
        after = machine.auto_finalize_if_fresh(
            before,
            schema=schema,
            schema_installed=True,
            has_jobs=bool(self._jobs(CANONICAL_SIDE) or self._store.state.dlq),
            runtimes=(),
            now=self._clock.now(),
        )
        self._set(after)
        return after is not before

    async def move_canonical_backlog(self, *, limit: int) -> int:
        schema = self._status.producer_schema
        if schema is None:
            return 0
        woken: set[str] = set()
        async with self._store.lock:
            copy = self._store.state.copy()
            canonical = copy.view(CANONICAL_SIDE).jobs
            target = copy.view(queue_storage_side(schema)).jobs
            waiting = sorted(
                (job for job in canonical.values() if job.state in _WAITING),
                key=lambda job: (job.run_at, job.id),
            )[: max(limit, 0)]
            for job in waiting:
                # Same id, attempt, errors and unique key: the claim stays with the id.
                target[job.id] = canonical.pop(job.id)
                if job.state is JobState.Available:
                    woken.add(queue_channel(job.queue))
            self._store.state = copy
        self._store.hub.publish(woken)
        return len(waiting)

    # ---------------------------------------------------------------- operators' steps
    def prepare(self, details: Mapping[str, Any] | None = None) -> TransitionStatus:
        """``awa storage prepare --engine queue_storage``."""
        return self._set(
            machine.prepare(
                self._status, QUEUE_STORAGE_ENGINE, dict(details or {}), self._clock.now()
            )
        )

    def enter_mixed_transition(
        self, runtimes: Iterable[RuntimeView], *, quiesced: bool = False
    ) -> TransitionStatus:
        """``awa storage enter-mixed-transition``, with the runtimes the gates look at."""
        return self._set(
            machine.enter_mixed(
                self._status,
                schema_installed=True,
                runtimes=runtimes,
                now=self._clock.now(),
                quiesced=quiesced,
            )
        )

    def finalize(self) -> TransitionStatus:
        """``awa storage finalize``: refused while canonical jobs are not finished."""
        return self._set(
            machine.finalize(
                self._status, canonical_backlog=self._canonical_backlog(), now=self._clock.now()
            )
        )

    def abort(self) -> TransitionStatus:
        """``awa storage abort``: refused once queue storage holds a job."""
        rows = bool(self._jobs(queue_storage_side(self._status.schema)))
        return self._set(
            machine.abort(self._status, queue_storage_rows=rows, now=self._clock.now())
        )
