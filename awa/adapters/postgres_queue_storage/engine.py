"""The queue-storage engine: the default :class:`~awa.ports.StorageEngine` (ADR 0006).

:class:`QueueStorageEngine` is a façade: it builds the engine's parts (:mod:`.parts`) and
delegates every port method to the part that owns it. The control-plane stores it shares
with the canonical engine (cron schedules, queue overrides, descriptors, batch operations)
are objects of their own (``awa.adapters._pg``), built once per database.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.leader import PostgresLeaderLock
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters._pg.pool import DictConnection, add_warmer, open_pool, remove_warmer
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage.install import DEFAULT_SCHEMA, install_queue_storage
from awa.adapters.postgres_queue_storage.parts import build_parts
from awa.adapters.postgres_queue_storage.ring import DEFAULT_FAILED_RETENTION
from awa.domain.admin_views import KindCounts, QueueDepth, QueueStateBucket, StateBucket
from awa.domain.batch_ops import BatchFilter, BatchSpec, ItemResult
from awa.domain.callbacks import CallbackExpressions
from awa.domain.job import Claim, DlqEntry, JobRecord, JobSpec, QueueCounts, RunLease
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import (
    DEFAULT_CARRY_BATCH,
    Backoff,
    PruneOutcome,
    RingSeal,
    RotateOutcome,
)
from awa.domain.rate_limits import GlobalRateLimit
from awa.ports.clock import Clock
from awa.ports.storage import Ack, DlqFilter, JobFilter, Rescued, UnitOfWork, VanishedStep


class QueueStorageEngine:
    """Append-first Postgres storage: ready rows, receipts and closures in a ring of list
    partitions reclaimed by ``TRUNCATE`` (:meth:`rotate_queue_ring`, :meth:`prune_oldest`).

    Build it with :meth:`open`; it is also the notifier for its own wake-ups.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        url: str,
        *,
        clock: Clock,
        backoff: Backoff,
        schema: str,
        policies: KindPolicies | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._url = url
        self._parts = build_parts(
            self,
            pool,
            clock=clock,
            backoff=backoff,
            policies=policies if policies is not None else KindPolicies(),
            schema=schema,
        )
        # New connections of the pool come to producers with the common insert planned.
        add_warmer(pool, self._parts.enqueue.warm)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        schema: str = DEFAULT_SCHEMA,
        max_connections: int = 10,
        policies: KindPolicies | None = None,
    ) -> QueueStorageEngine:
        """Migrate, make sure the engine is installed in ``schema`` and open a pool."""
        await install_queue_storage(url, schema)
        pool = await open_pool(url, max_connections=max_connections)
        return cls(
            pool,
            url,
            clock=clock if clock is not None else SystemClock(),
            backoff=backoff if backoff is not None else Backoff(),
            schema=schema,
            policies=policies,
        )

    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """Listen for ``awa:<queue>`` / ``awa:cancel`` on a dedicated connection."""
        return await PostgresNotifier(self._url, clock=self._clock).subscribe(channels)

    def leader_lock(self) -> PostgresLeaderLock:
        """A new candidate for the cluster's maintenance leadership."""
        return PostgresLeaderLock(self._url)

    def unit_of_work_for(self, conn: DictConnection) -> UnitOfWork:
        """:class:`~awa.ports.transactions.TransactionJoiner`: a unit of work on a
        caller's connection that is already inside a transaction."""
        return self._parts.connections.joined(self, conn)

    async def close(self) -> None:
        if not self._parts.connections.closed:
            await self.retire()
            await self._pool.close()

    async def retire(self) -> None:
        """Let the work in flight finish (inserts waiting for their batch, wake-ups),
        refuse new work and close the kept connections. The pool is left to its owner:
        :meth:`close`, or the composition that shares it between engines."""
        remove_warmer(self._pool, self._parts.enqueue.warm)
        await self._parts.group.settle()
        await self._parts.wakes.drain()
        await self._parts.claims.drain()
        await self._parts.connections.close_kept()

    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]:
        return self._parts.enqueue.transaction()

    # ---------------------------------------------------------------- producers
    async def enqueue_many_routed(
        self, specs: Sequence[JobSpec], *, validated: bool = False
    ) -> list[JobRecord]:
        return await self._parts.enqueue.enqueue_many_routed(specs, validated=validated)

    async def warm_routed(self) -> None:
        await self._parts.enqueue.warm_routed()

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> list[JobRecord]:
        return await self._parts.enqueue.enqueue_many(specs, uow=uow, validated=validated)

    async def enqueue_many_copy(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> int:
        return await self._parts.copy.enqueue_many_copy(specs, uow=uow, validated=validated)

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        return await self._parts.enqueue.enqueue_many_skip_duplicates(specs)

    # ---------------------------------------------------------------- workers
    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        return await self._parts.claims.claim(
            queue,
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
            max_running_per_key=max_running_per_key,
            global_rate_limit=global_rate_limit,
            global_rate_limit_per_key=global_rate_limit_per_key,
        )

    async def warm_up(self, queues: Sequence[str]) -> None:
        await self._parts.claims.warm_up(queues)

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._parts.completion.complete(leases)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        return await self._parts.outcomes.retry(lease, error=error, delay=delay)

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self._parts.outcomes.snooze(lease, delay=delay)

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self._parts.outcomes.cancel_attempt(lease, reason=reason)

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        return await self._parts.outcomes.fail(lease, error=error)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        return await self._parts.outcomes.release(lease, error=error)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._parts.outcomes.heartbeat(leases)

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        return await self._parts.outcomes.update_progress(
            lease, progress=progress, metadata_updates=metadata_updates
        )

    # ---------------------------------------------------------------- callbacks
    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        return await self._parts.callbacks.register_callback(
            lease, callback_id=callback_id, timeout=timeout, expressions=expressions
        )

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        return await self._parts.callbacks.callback_expressions(callback_id)

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        return await self._parts.callbacks.wait_for_callback(lease)

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        return await self._parts.callbacks.resolve_callback(
            callback_id, action=action, payload=payload, error=error, expression=expression
        )

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        return await self._parts.callbacks.heartbeat_callback(callback_id, timeout=timeout)

    # ---------------------------------------------------------------- maintenance sweeps
    async def promote_due(self, *, limit: int = 4096) -> int:
        return await self._parts.sweeps.promote_due(limit=limit)

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        return await self._parts.sweeps.rescue_stale_heartbeats(staleness=staleness)

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        return await self._parts.sweeps.rescue_expired_deadlines()

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        return await self._parts.sweeps.rescue_expired_callbacks()

    # ---------------------------------------------------------------- batch operations
    async def count_batch_targets(self, filter: BatchFilter) -> int:
        return await self._parts.batch.count_batch_targets(filter)

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        return await self._parts.batch.list_batch_targets(filter, after_id=after_id, limit=limit)

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        return await self._parts.batch.apply_batch_change(job_id, spec)

    # ---------------------------------------------------------------- admin reads and queue control
    async def get_job(self, job_id: int) -> JobRecord | None:
        return await self._parts.admin.get_job(job_id)

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        return await self._parts.admin.list_jobs(filter, limit=limit)

    async def queue_counts(self) -> list[QueueCounts]:
        return await self._parts.admin.queue_counts()

    async def queue_depths(self) -> list[QueueDepth]:
        return await self._parts.admin.queue_depths()

    async def kind_counts(self) -> list[KindCounts]:
        return await self._parts.admin.kind_counts()

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        return await self._parts.admin.finalized_timeseries(window=window)

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        return await self._parts.admin.finalized_by_queue(window=window)

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        return await self._parts.dlq.dlq_by_minute(window=window)

    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        await self._parts.admin.pause_queue(queue, paused_by=paused_by)

    async def resume_queue(self, queue: str) -> None:
        await self._parts.admin.resume_queue(queue)

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        await self._parts.admin.set_queue_dlq(queue, enabled=enabled)

    # ---------------------------------------------------------------- admin changes
    async def drain_queue(self, queue: str) -> int:
        return await self._parts.changes.drain_queue(queue)

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        return await self._parts.changes.cancel_job(job_id)

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        return await self._parts.changes.cancel_by_unique_key(unique_key)

    async def retry_job(self, job_id: int) -> JobRecord | None:
        return await self._parts.changes.retry_job(job_id)

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        return await self._parts.changes.retry_failed(filter)

    async def pruned_failed_count(self, queue: str) -> int | None:
        counts = await self._parts.queue_ring.pruned_counts()
        return counts.get(queue, {}).get("failed", 0)

    async def discard_failed(self, kind: str) -> int:
        return await self._parts.changes.discard_failed(kind)

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._parts.changes.delete_jobs(job_ids)

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        return await self._parts.changes.answer_vanished_parents(
            after=after, limit=limit, seen_before=seen_before
        )

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        return await self._parts.changes.cleanup_retention(
            completed=completed, failed=failed, batch_size=batch_size
        )

    # ---------------------------------------------------------------- DLQ
    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        return await self._parts.dlq.move_failed_to_dlq(job_id, reason=reason)

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        return await self._parts.dlq.bulk_move_failed_to_dlq(filter, reason=reason)

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        return await self._parts.dlq.list_dead_lettered(filter, limit=limit)

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        return await self._parts.dlq.list_dlq(filter, limit=limit)

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        return await self._parts.dlq.get_dlq(job_id)

    async def dlq_depth(self, queue: str | None = None) -> int:
        return await self._parts.dlq.dlq_depth(queue)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return await self._parts.dlq.dlq_depth_by_queue()

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        return await self._parts.dlq.dlq_depth_by_kind()

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        return await self._parts.dlq.retry_from_dlq(
            job_id, run_at=run_at, priority=priority, queue=queue
        )

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        return await self._parts.dlq.bulk_retry_from_dlq(filter)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        return await self._parts.dlq.purge_dlq(filter)

    async def purge_dlq_job(self, job_id: int) -> bool:
        return await self._parts.dlq.purge_dlq_job(job_id)

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        return await self._parts.dlq.cleanup_dlq(retention=retention, batch_size=batch_size)

    # ---------------------------------------------------------------- admin changes
    async def reset(self) -> None:
        await self._parts.changes.reset()
        self._parts.claims.forget()

    # ---------------------------------------------------------------- ring maintenance
    async def rotate_queue_ring(self, seal: RingSeal | None = None) -> RotateOutcome:
        return await self._parts.queue_ring.rotate_queue_ring(seal)

    async def prune_oldest(
        self,
        *,
        failed_retention: timedelta = DEFAULT_FAILED_RETENTION,
        carry_batch: int = DEFAULT_CARRY_BATCH,
    ) -> PruneOutcome:
        return await self._parts.queue_ring.prune_oldest(
            failed_retention=failed_retention, carry_batch=carry_batch
        )

    async def rotate_leases(self) -> RotateOutcome:
        return await self._parts.lease_ring.rotate_leases()

    async def prune_leases(self) -> PruneOutcome:
        return await self._parts.lease_ring.prune_leases()

    async def pruned_counts(self) -> dict[str, dict[str, int]]:
        return await self._parts.queue_ring.pruned_counts()

    async def compact_control_tables(self) -> list[str]:
        return await self._parts.long_transactions.compact_control_tables()

    async def rotate(self, *, seal: RingSeal | None = None) -> RotateOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: :meth:`rotate_queue_ring`."""
        return await self._parts.queue_ring.rotate_queue_ring(seal)

    async def prune(
        self,
        *,
        failed_retention: timedelta = DEFAULT_FAILED_RETENTION,
        carry_batch: int = DEFAULT_CARRY_BATCH,
    ) -> PruneOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: :meth:`prune_oldest`."""
        return await self._parts.queue_ring.prune_oldest(
            failed_retention=failed_retention, carry_batch=carry_batch
        )

    # The long-transaction thresholds of the maintenance leader (tests shorten them).
    @property
    def long_transaction_after(self) -> timedelta:
        return self._parts.long_transactions.long_transaction_after

    @long_transaction_after.setter
    def long_transaction_after(self, value: timedelta) -> None:
        self._parts.long_transactions.long_transaction_after = value

    @property
    def horizon_check_every(self) -> float:
        return self._parts.long_transactions.horizon_check_every

    @horizon_check_every.setter
    def horizon_check_every(self, value: float) -> None:
        self._parts.long_transactions.horizon_check_every = value

    @property
    def compact_growth_bytes(self) -> int:
        return self._parts.long_transactions.compact_growth_bytes

    @compact_growth_bytes.setter
    def compact_growth_bytes(self, value: int) -> None:
        self._parts.long_transactions.compact_growth_bytes = value
