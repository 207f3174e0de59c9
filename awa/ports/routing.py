"""What the routing engine asks of the engines it composes (ADR 0007, ADR 0001).

The routing engine sends each call to the engine that owns it. It knows the engines only
through these protocols: the *home* engine (canonical storage, which also carries the
store's notifications and leader lock) and the *target* engine of each queue-storage
schema (the control-plane stores are no engine's: :mod:`awa.ports.control_plane`).
Optional extras of a target (:class:`~awa.ports.producers.CopyEnqueue`,
:class:`~awa.ports.producers.RouteCheckedEnqueue`,
:class:`~awa.ports.maintenance.RingMaintenance`, :class:`~awa.ports.storage.WorkerWarmUp`)
are found with ``isinstance`` once per engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from awa.domain.job import JobRecord, JobSpec
from awa.ports.leader import LeaderCandidates
from awa.ports.notifier import Notifier
from awa.ports.storage import StorageEngine, UnitOfWork
from awa.ports.transactions import TransactionJoiner

C_contra = TypeVar("C_contra", contravariant=True)


class RoutedEngine(StorageEngine, TransactionJoiner[C_contra], Protocol[C_contra]):
    """An engine the routing engine sends calls to: the storage port, writable inside a
    transaction of the shared store."""


class HomeEngine(RoutedEngine[C_contra], Notifier, LeaderCandidates, Protocol[C_contra]):
    """The canonical engine: it also carries what both engines share of the store's
    plumbing (notifications and the leader lock)."""


class TargetEngine(RoutedEngine[C_contra], Protocol[C_contra]):
    """The queue-storage engine of one schema."""

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> list[JobRecord]:
        """:meth:`~awa.ports.storage.StorageEngine.enqueue_many`; ``validated`` as in
        :mod:`awa.ports.producers`."""
        ...
