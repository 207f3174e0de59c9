"""What the routing engine asks of the engines it composes (ADR 0007, ADR 0001).

The routing engine sends each call to the engine that owns it. It knows the engines only
through these protocols: the *home* engine (canonical storage, where the shared control
rows, schedules, overrides, descriptors and queue samples are reached) and the *target*
engine of each queue-storage schema. Optional extras of a target
(:class:`~awa.ports.producers.CopyEnqueue`,
:class:`~awa.ports.producers.RouteCheckedEnqueue`,
:class:`~awa.ports.maintenance.RingMaintenance`, :class:`~awa.ports.storage.WorkerWarmUp`)
are found with ``isinstance`` once per engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from awa.domain.job import JobRecord, JobSpec
from awa.ports.cron import CronStore
from awa.ports.descriptors import DescriptorStore
from awa.ports.leader import LeaderCandidates
from awa.ports.notifier import Notifier
from awa.ports.overrides import QueueOverrideStore
from awa.ports.samples import QueueSampleStore
from awa.ports.storage import StorageEngine, UnitOfWork
from awa.ports.transactions import TransactionJoiner

C_contra = TypeVar("C_contra", contravariant=True)


class RoutedEngine(StorageEngine, TransactionJoiner[C_contra], Protocol[C_contra]):
    """An engine the routing engine sends calls to: the storage port, writable inside a
    transaction of the shared store."""


class HomeEngine(
    RoutedEngine[C_contra],
    CronStore,
    QueueOverrideStore,
    DescriptorStore,
    QueueSampleStore,
    Notifier,
    LeaderCandidates,
    Protocol[C_contra],
):
    """The canonical engine: it also reaches what both engines share (batch-operation
    control rows, cron schedules, queue overrides, descriptors, queue samples,
    notifications and the leader lock)."""


class TargetEngine(RoutedEngine[C_contra], Protocol[C_contra]):
    """The queue-storage engine of one schema."""

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> list[JobRecord]:
        """:meth:`~awa.ports.storage.StorageEngine.enqueue_many`; ``validated`` as in
        :mod:`awa.ports.producers`."""
        ...
