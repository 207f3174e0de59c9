"""The control plane of one backend: the stores that are not the jobs.

A database (or the in-memory model of one) keeps, beside its jobs, what operators and
runtimes declare about them. Every storage engine of a backend shares these stores, so the
composition root builds them once per backend and hands them to the client and the
runtime next to the storage engine; no engine carries them.
"""

from __future__ import annotations

import attrs

from awa.ports.batch_ops import BatchOperationStore
from awa.ports.cron import CronStore
from awa.ports.descriptors import DescriptorStore
from awa.ports.overrides import QueueOverrideStore
from awa.ports.rate_limiters import RateLimiterReader
from awa.ports.relations import JobRelations
from awa.ports.results import ResultStore
from awa.ports.runtime_registry import RuntimeRegistry
from awa.ports.samples import QueueSampleStore
from awa.ports.storage import StorageEngine


@attrs.frozen
class ControlPlane:
    """The control-plane stores of one backend."""

    #: batch operations and their items (ADR 0010)
    batch_operations: BatchOperationStore
    #: cron schedules, fired by the maintenance leader
    cron: CronStore
    #: operators' live per-queue overrides, read by each queue's dispatcher
    overrides: QueueOverrideStore
    #: the queue and job-kind descriptors runtimes declare
    descriptors: DescriptorStore
    #: each queue's depth and lag, sampled once a minute by the maintenance leader
    queue_samples: QueueSampleStore
    #: the stored results of tasks that opt in, and their waiters' wake-ups
    results: ResultStore
    #: the runtimes' published snapshots, as operator surfaces read them (a worker
    #: publishes its own through a registry bound to its transition role)
    registry: RuntimeRegistry
    #: dependency edges and per-key loads across every engine's jobs (operator reads)
    relations: JobRelations
    #: the fleet-wide rate limiters the claims keep (ADR 0029), read for queue_stats
    rate_limiters: RateLimiterReader


@attrs.frozen
class Backend:
    """A storage engine and the control plane of the same backend, opened together (the
    maintenance thread opens one on its own event loop); closing the engine releases
    what both run on."""

    engine: StorageEngine
    control: ControlPlane
