"""Admin surfaces of the routing engine: reads and writes consult every engine that can
hold the job, the DLQ follows the producers' engine, and batch targets come from every
engine that can hold a queued job."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from awa.adapters.routing.base import C, RoutingBase, T
from awa.domain.admin_views import (
    KindCounts,
    QueueDepth,
    QueueStateBucket,
    StateBucket,
    queue_state_buckets,
)
from awa.domain.batch_ops import (
    BatchFilter,
    BatchSpec,
    ItemOutcome,
    ItemResult,
)
from awa.domain.job import DlqEntry, JobRecord, QueueCounts
from awa.domain.states import JobState
from awa.ports.storage import DlqFilter, JobFilter, StorageEngine, VanishedStep


class AdminOps(RoutingBase[C]):
    """Admin reads and writes, the DLQ and batch targets."""

    # ---------------------------------------------------------------- admin reads
    async def _first(self, call: Callable[[StorageEngine], Awaitable[T | None]]) -> T | None:
        for engine in self._read_order(await self.status(max_age=0.0)):
            found = await call(engine)
            if found is not None:
                return found
        return None

    async def get_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.get_job(job_id))

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        if limit <= 0:
            return []
        merged: dict[int, JobRecord] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for job in await engine.list_jobs(filter, limit=limit):
                merged.setdefault(job.id, job)
        return sorted(merged.values(), key=lambda j: j.id, reverse=True)[:limit]

    async def queue_counts(self) -> list[QueueCounts]:
        merged: dict[str, QueueCounts] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.queue_counts():
                prior = merged.get(item.queue)
                if prior is None:
                    merged[item.queue] = item
                    continue
                counts = dict(prior.counts)
                for state, n in item.counts.items():
                    counts[state] = counts.get(state, 0) + n
                oldest = [t for t in (prior.oldest_available_at, item.oldest_available_at) if t]
                merged[item.queue] = QueueCounts(
                    queue=item.queue,
                    counts=counts,
                    paused=prior.paused or item.paused,
                    completed_last_hour=prior.completed_last_hour + item.completed_last_hour,
                    oldest_available_at=min(oldest) if oldest else None,
                )
        return [merged[q] for q in sorted(merged)]

    async def queue_depths(self) -> list[QueueDepth]:
        # A job lives in one engine at a time: the depths add up.
        merged: dict[str, QueueDepth] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.queue_depths():
                prior = merged.get(item.queue)
                if prior is not None:
                    counts = {
                        s: prior.count(s) + item.count(s) for s in {*prior.counts, *item.counts}
                    }
                    oldest = [t for t in (prior.oldest_available_at, item.oldest_available_at) if t]
                    item = QueueDepth(item.queue, counts, min(oldest) if oldest else None)
                merged[item.queue] = item
        return [merged[q] for q in sorted(merged)]

    async def kind_counts(self) -> list[KindCounts]:
        # A job lives in one engine at a time, so totals add up; the queue count is the
        # largest of the engines' (a kind seen in different queues on each side of a
        # transition is undercounted until the move ends, never overcounted).
        merged: dict[str, KindCounts] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.kind_counts():
                prior = merged.get(item.kind)
                merged[item.kind] = (
                    item
                    if prior is None
                    else KindCounts(
                        kind=item.kind,
                        job_count=prior.job_count + item.job_count,
                        queue_count=max(prior.queue_count, item.queue_count),
                        completed_last_hour=prior.completed_last_hour + item.completed_last_hour,
                    )
                )
        return [merged[k] for k in sorted(merged)]

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        merged: Counter[tuple[datetime, JobState]] = Counter()
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.finalized_timeseries(window=window):
                merged[(item.bucket, item.state)] += item.count
        return [
            StateBucket(bucket=bucket, state=state, count=n)
            for (bucket, state), n in sorted(merged.items(), key=lambda i: (i[0][0], str(i[0][1])))
        ]

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        rows = []
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.finalized_by_queue(window=window):
                rows.append(
                    {
                        "bucket": item.bucket,
                        "queue": item.queue,
                        "state": item.state,
                        "n": item.count,
                    }
                )
        return queue_state_buckets(rows)

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        return await (await self._dlq()).dlq_by_minute(window=window)

    # ---------------------------------------------------------------- admin writes
    async def _every(self, call: Callable[[StorageEngine], Awaitable[None]]) -> None:
        for engine in self._read_order(await self.status(max_age=0.0)):
            await call(engine)

    async def _sum(self, call: Callable[[StorageEngine], Awaitable[int]]) -> int:
        total = 0
        for engine in self._read_order(await self.status(max_age=0.0)):
            total += await call(engine)
        return total

    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        await self._every(lambda e: e.pause_queue(queue, paused_by=paused_by))

    async def resume_queue(self, queue: str) -> None:
        await self._every(lambda e: e.resume_queue(queue))

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        await self._every(lambda e: e.set_queue_dlq(queue, enabled=enabled))

    async def drain_queue(self, queue: str) -> int:
        return await self._sum(lambda e: e.drain_queue(queue))

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.cancel_job(job_id))

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        return await self._first(lambda e: e.cancel_by_unique_key(unique_key))

    async def retry_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.retry_job(job_id))

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        retried: list[JobRecord] = []
        for engine in self._read_order(await self.status(max_age=0.0)):
            retried.extend(await engine.retry_failed(filter))
        return retried

    async def pruned_failed_count(self, queue: str) -> int | None:
        # Counted by queue storage alone: known once producers write there.
        schema = (await self.status(max_age=0.0)).producer_schema
        if schema is None:
            return None
        return await self.queue_storage(schema).pruned_failed_count(queue)

    async def discard_failed(self, kind: str) -> int:
        return await self._sum(lambda e: e.discard_failed(kind))

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._sum(lambda e: e.delete_jobs(job_ids))

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        # The parents are looked for through every engine by whichever engine asks; the
        # engine producers write to answers, as it holds the children inserted last.
        engine = self._producer_engine(await self.status(max_age=0.0))
        return await engine.answer_vanished_parents(
            after=after, limit=limit, seen_before=seen_before
        )

    # ---------------------------------------------------------------- DLQ
    async def _dlq(self) -> StorageEngine:
        return self._dlq_engine(await self.status(max_age=0.0))

    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        return await self._first(lambda e: e.move_failed_to_dlq(job_id, reason=reason))

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        return await self._sum(lambda e: e.bulk_move_failed_to_dlq(filter, reason=reason))

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        return await (await self._dlq()).list_dlq(filter, limit=limit)

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        return await (await self._dlq()).get_dlq(job_id)

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        return await (await self._dlq()).list_dead_lettered(filter, limit=limit)

    async def dlq_depth(self, queue: str | None = None) -> int:
        return await (await self._dlq()).dlq_depth(queue)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return await (await self._dlq()).dlq_depth_by_queue()

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        return await (await self._dlq()).dlq_depth_by_kind()

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        return await (await self._dlq()).retry_from_dlq(
            job_id, run_at=run_at, priority=priority, queue=queue
        )

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        return await (await self._dlq()).bulk_retry_from_dlq(filter)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        return await (await self._dlq()).purge_dlq(filter)

    async def purge_dlq_job(self, job_id: int) -> bool:
        return await (await self._dlq()).purge_dlq_job(job_id)

    # ---------------------------------------------------------------- batch targets
    # Targets come from every engine that can hold a queued job (the operations have a
    # store of their own, shared by both engines).
    async def count_batch_targets(self, filter: BatchFilter) -> int:
        return await self._sum(lambda e: e.count_batch_targets(filter))

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        merged: dict[int, JobRecord] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for job in await engine.list_batch_targets(filter, after_id=after_id, limit=limit):
                merged.setdefault(job.id, job)
        return sorted(merged.values(), key=lambda j: j.id)[: max(limit, 0)]

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        for engine in self._read_order(await self.status(max_age=0.0)):
            result = await engine.apply_batch_change(job_id, spec)
            if result.outcome != ItemOutcome.MISSING:
                return result
        return ItemResult(job_id, ItemOutcome.MISSING)
