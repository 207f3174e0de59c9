"""Producer capabilities beyond :meth:`~awa.ports.storage.StorageEngine.enqueue_many`.

Some engines have faster or routed insert paths; the routing engine and the clients reach
them through these protocols. ``validated=True`` always means: the caller already ran
:func:`~awa.domain.validation.validate_spec` on every spec as it stands, so the engine
does not check it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from awa.domain.job import JobRecord, JobSpec
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES
from awa.ports.storage import UnitOfWork


class RouteChanged(Exception):
    """Producers no longer write new jobs to the engine asked (the storage transition moved
    on): nothing was inserted; read the route again. ``supported`` is False when the store
    cannot check the route at all (a schema before migration 0320)."""

    def __init__(self, message: str, *, supported: bool = True) -> None:
        super().__init__(message)
        self.supported = supported


@runtime_checkable
class CopyEnqueue(Protocol):
    """An engine with a bulk insert path (Postgres ``COPY``)."""

    async def enqueue_many_copy(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> int:
        """Insert ``specs`` as :meth:`~awa.ports.storage.StorageEngine.enqueue_many`
        does (a unique clash inserts none of them) and return how many were inserted."""
        ...


@runtime_checkable
class RouteCheckedEnqueue(Protocol):
    """An engine that can insert for a producer that remembers the route: the insert
    checks, under the producers' transition lock, that new jobs still go to this engine."""

    async def enqueue_many_routed(
        self, specs: Sequence[JobSpec], *, validated: bool = False
    ) -> list[JobRecord]:
        """Insert ``specs`` (none with a unique key) in a transaction of their own whose
        first step is the route check; raises :class:`RouteChanged` (nothing written) when
        producers write elsewhere now."""
        ...

    async def warm_routed(self) -> None:
        """Prepare the engine for the routed inserts to come (Postgres: plan the insert on
        a pooled connection), so the first of them do not pay for it; best effort, never
        raises for the store's sake."""
        ...


class RoutedInsert(Protocol):
    """A store that routes one insert itself, in one round trip (Postgres:
    ``awa.insert_job_compat`` reads the route under the producers' lock and appends to
    that engine in the same statement). Its timestamps come from the store's clock."""

    async def insert_routed(self, spec: JobSpec) -> JobRecord:
        """Insert one available job without a unique key where producers write now."""
        ...


class StripedProducer(Protocol):
    """The client's producer calls: queue stripes and pre-validated specs.

    With ``stripes > 1`` and queue storage as the route, each job goes to one stripe of
    its queue (``queue#k``, :mod:`awa.domain.stripes`); canonical storage has no stripes.
    """

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        """:meth:`~awa.ports.storage.StorageEngine.enqueue_many` with stripes."""
        ...

    async def enqueue_many_skip_duplicates(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        """Enqueue ``specs``, skipping those whose unique key is already held."""
        ...

    async def enqueue_many_copy(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> int:
        """Bulk insert on the fast path; jobs whose unique key is held are skipped.
        Returns how many were inserted. ``ValidationError`` where the route has no fast
        path (canonical storage)."""
        ...
