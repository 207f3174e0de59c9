"""Operator operations of the in-memory engine: reads, queue control, retries and the DLQ."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from awa.adapters.inmemory.base import EngineBase, Write, matches
from awa.adapters.inmemory.state import EngineState
from awa.domain import dependencies, lifecycle
from awa.domain.admin_views import (
    DEPTH_STATES,
    KindCounts,
    QueueDepth,
    QueueStateBucket,
    StateBucket,
    first_minute,
    minute_of,
    queue_depths_from,
    queue_state_buckets,
)
from awa.domain.channels import queue_channel
from awa.domain.job import DlqEntry, JobRecord, QueueCounts, initial_state
from awa.domain.states import LIVE_STATES, TERMINAL_STATES, JobState
from awa.ports.storage import DlqFilter, JobFilter, VanishedStep


def _dlq_matches(entry: DlqEntry, filter: DlqFilter) -> bool:
    job = entry.job
    if filter.kind is not None and job.kind != filter.kind:
        return False
    if filter.queue is not None and job.queue != filter.queue:
        return False
    if filter.tag is not None and filter.tag not in job.tags:
        return False
    if filter.before_dlq_at is not None and filter.before_id is not None:
        return (entry.dlq_at, job.id) < (filter.before_dlq_at, filter.before_id)
    if filter.before_dlq_at is not None:
        return entry.dlq_at < filter.before_dlq_at
    if filter.before_id is not None:
        return job.id < filter.before_id
    return True


def _newest_first(entries: list[DlqEntry]) -> list[DlqEntry]:
    return sorted(entries, key=lambda entry: (entry.dlq_at, entry.job.id), reverse=True)


class AdminOps(EngineBase):
    """Admin reads and writes. Every write is atomic: it applies fully or not at all."""

    # ---------------------------------------------------------------- reads
    async def get_job(self, job_id: int) -> JobRecord | None:
        return self._read().jobs.get(job_id)

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        found = [job for job in self._read().jobs.values() if matches(job, filter)]
        found.sort(key=lambda job: job.id, reverse=True)
        return found[: max(limit, 0)]

    async def queue_counts(self) -> list[QueueCounts]:
        state = self._read()
        now = self._clock.now()
        names = {job.queue for job in state.jobs.values()} | set(state.queues)
        result = []
        for name in sorted(names):
            jobs = [job for job in state.jobs.values() if job.queue == name]
            counts = {s: 0 for s in JobState}
            for job in jobs:
                counts[job.state] += 1
            recent = now - timedelta(hours=1)
            available_since = [job.run_at for job in jobs if job.state == JobState.Available]
            result.append(
                QueueCounts(
                    queue=name,
                    counts=counts,
                    paused=state.is_paused(name),
                    completed_last_hour=sum(
                        1
                        for job in jobs
                        if job.state == JobState.Completed
                        and job.finalized_at is not None
                        and job.finalized_at > recent
                    ),
                    oldest_available_at=min(available_since, default=None),
                )
            )
        return result

    async def queue_depths(self) -> list[QueueDepth]:
        return queue_depths_from(
            {
                "queue": job.queue,
                "state": job.state.sql_name,
                "n": 1,
                "oldest": job.run_at if job.state == JobState.Available else None,
            }
            for job in self._read().jobs.values()
            if job.state in DEPTH_STATES
        )

    async def kind_counts(self) -> list[KindCounts]:
        jobs = list(self._read().jobs.values())
        recent = self._clock.now() - timedelta(hours=1)
        result = []
        for kind in sorted({job.kind for job in jobs}):
            of_kind = [job for job in jobs if job.kind == kind]
            result.append(
                KindCounts(
                    kind=kind,
                    job_count=len(of_kind),
                    queue_count=len({job.queue for job in of_kind}),
                    completed_last_hour=sum(
                        1
                        for job in of_kind
                        if job.state == JobState.Completed
                        and job.finalized_at is not None
                        and job.finalized_at > recent
                    ),
                )
            )
        return result

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        since = self._clock.now() - window
        buckets: Counter[tuple[datetime, JobState]] = Counter()
        for job in self._read().jobs.values():
            at = job.finalized_at
            if job.state in TERMINAL_STATES and at is not None and at >= since:
                buckets[(at.replace(second=0, microsecond=0), job.state)] += 1
        return [
            StateBucket(bucket=bucket, state=state, count=n)
            for (bucket, state), n in sorted(buckets.items(), key=lambda i: (i[0][0], str(i[0][1])))
        ]

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        since = first_minute(self._clock.now(), window)
        return queue_state_buckets(
            {"bucket": minute_of(job.finalized_at), "queue": job.queue, "state": job.state, "n": 1}
            for job in self._read().jobs.values()
            if job.state in TERMINAL_STATES
            and job.finalized_at is not None
            and job.finalized_at >= since
        )

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        since = first_minute(self._clock.now(), window)
        return queue_state_buckets(
            {
                "bucket": minute_of(entry.job.finalized_at),
                "queue": entry.job.queue,
                "state": JobState.Failed,
                "n": 1,
            }
            for entry in self._read().dlq.values()
            if entry.job.finalized_at is not None and entry.job.finalized_at >= since
        )

    # ---------------------------------------------------------------- queue control
    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        async with self._write() as write:
            meta = write.state.meta(queue)
            if not meta.paused:
                write.state.queues[queue] = attrs.evolve(
                    meta, paused=True, paused_at=write.now, paused_by=paused_by
                )

    async def resume_queue(self, queue: str) -> None:
        async with self._write() as write:
            # Like an UPDATE of queue_meta: a queue without settings gains none.
            if queue in write.state.queues:
                write.state.queues[queue] = attrs.evolve(
                    write.state.queues[queue], paused=False, paused_at=None, paused_by=None
                )

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        async with self._write() as write:
            write.state.queues[queue] = attrs.evolve(write.state.meta(queue), dlq_enabled=enabled)

    async def drain_queue(self, queue: str) -> int:
        async with self._write() as write:
            pending = [
                job
                for job in write.state.jobs.values()
                if job.queue == queue and job.state in lifecycle.DRAINABLE_STATES
            ]
            drain = lifecycle.drain(write.now)
            # Every pending job is cancelled first and the jobs waiting on them are answered
            # after, as the drain's statement and its resolve do on Postgres: a waiting job
            # drained with its parent ends cancelled by the drain, whatever its policy.
            drained = [
                self._cancel(write, job, drain, resolve=False) for job in self._sorted(pending)
            ]
            self._finished(write, drained)
        return len(pending)

    # ---------------------------------------------------------------- job control
    async def cancel_job(self, job_id: int) -> JobRecord | None:
        async with self._write() as write:
            job = write.state.jobs.get(job_id)
            if job is not None:
                job = self._cancel(write, job, lifecycle.operator_cancel(write.now))
        return job

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        async with self._write() as write:
            holder = write.state.unique.get(unique_key)
            job = None if holder is None else write.state.jobs.get(holder)
            if job is None or job.state.is_terminal:
                return None
            cancelled = self._cancel(write, job, lifecycle.operator_cancel(write.now))
        return cancelled

    def _operator_retry(self, write: Write, job: JobRecord) -> JobRecord:
        transition = lifecycle.operator_retry(job.state, write.now)
        if transition is None:
            return job
        retried = self._apply(write, job, transition)
        write.notify.add(queue_channel(retried.queue))
        if job.state.is_terminal:
            self._retried(write, [job.id])
        return retried

    async def retry_job(self, job_id: int) -> JobRecord | None:
        async with self._write() as write:
            job = write.state.jobs.get(job_id)
            if job is not None:
                job = self._operator_retry(write, job)
        return job

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        only_failed = attrs.evolve(filter, state=JobState.Failed)
        async with self._write() as write:
            failed = [job for job in write.state.jobs.values() if matches(job, only_failed)]
            retried = [self._operator_retry(write, job) for job in self._sorted(failed)]
        return retried

    async def pruned_failed_count(self, queue: str) -> int | None:
        return None  # the model's retention deletes without counting, as canonical does

    async def discard_failed(self, kind: str) -> int:
        return await self._delete_where(JobFilter(kind=kind, state=JobState.Failed), None)

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._delete_where(JobFilter(), set(job_ids))

    async def _delete_where(self, filter: JobFilter, ids: set[int] | None) -> int:
        async with self._write() as write:
            doomed = [
                job.id
                for job in write.state.jobs.values()
                if matches(job, filter)
                and (ids is None or job.id in ids)
                and job.state not in LIVE_STATES
            ]
            gone = [(job_id, write.state.jobs[job_id].state) for job_id in doomed]
            for job_id in doomed:
                write.state.delete(job_id)
            # The children still waiting on a deleted job: as for a cancel.
            deps = write.state.deps
            parents = dependencies.deleted_parents(gone, deps.waited_on(doomed))
            if parents:
                answered = deps.resolve([], parents, write.now, parents)
                self._apply_effects(write, dependencies.effects(answered, write.now))
        return len(doomed)

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        # One store, each write whole: a parent absent from it is gone, never mid-way
        # through a move, so one sighting suffices and ``seen_before`` has nothing to wait
        # for.
        async with self._write() as write:
            deps = write.state.deps
            page = sorted(
                {
                    parent
                    for child, edges in deps.parents.items()
                    for parent in edges
                    if parent > after and deps.unresolved(child, parent)
                }
            )[: max(limit, 0)]
            sides = write.store.sides.values()
            gone = [
                p for p in page if p not in write.state.dlq and not any(p in jobs for jobs in sides)
            ]
            if gone:
                answered = deps.resolve([], gone, write.now, gone)
                self._apply_effects(write, dependencies.effects(answered, write.now))
        return VanishedStep(page[-1] if page and len(page) == limit else None, len(gone))

    # ---------------------------------------------------------------- DLQ
    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        async with self._write() as write:
            job = write.state.jobs.get(job_id)
            if job is None or job.state != JobState.Failed:
                return None
            entry = write.state.move_to_dlq(job, reason=reason, now=write.now)
        return entry

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        only_failed = attrs.evolve(filter, state=JobState.Failed)
        async with self._write() as write:
            failed = [job for job in write.state.jobs.values() if matches(job, only_failed)]
            for job in self._sorted(failed):
                write.state.move_to_dlq(job, reason=reason, now=write.now)
        return len(failed)

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        found = [entry for entry in self._read().dlq.values() if _dlq_matches(entry, filter)]
        return _newest_first(found)[: max(limit, 0)]

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        return self._read().dlq.get(job_id)

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        found = [entry.job for entry in self._read().dlq.values() if matches(entry.job, filter)]
        found.sort(key=lambda job: job.id, reverse=True)
        return found[: max(limit, 0)]

    async def dlq_depth(self, queue: str | None = None) -> int:
        return sum(
            1 for entry in self._read().dlq.values() if queue is None or entry.job.queue == queue
        )

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        depth: dict[str, int] = {}
        for entry in self._read().dlq.values():
            depth[entry.job.queue] = depth.get(entry.job.queue, 0) + 1
        return sorted(depth.items())

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        depth: dict[tuple[str, str], int] = {}
        for entry in self._read().dlq.values():
            key = (entry.job.kind, entry.job.queue)
            depth[key] = depth.get(key, 0) + 1
        return [(kind, queue, n) for (kind, queue), n in sorted(depth.items())]

    def _restore_from_dlq(
        self,
        write: Write,
        entry: DlqEntry,
        *,
        run_at: datetime | None,
        priority: int | None,
        queue: str | None,
    ) -> JobRecord:
        """Re-enqueue a held job under its own id with a fresh attempt budget.

        This is an insert of a new job row, not a state change of an existing one (the
        DLQ is not a job state), so it claims the unique key as an enqueue would.
        """
        del write.state.dlq[entry.job.id]
        job = attrs.evolve(
            entry.job,
            state=initial_state(run_at),
            run_at=write.now if run_at is None else run_at,
            attempt=0,
            run_lease=0,
            finalized_at=None,
            priority=entry.job.priority if priority is None else priority,
            queue=entry.job.queue if queue is None else queue,
        )
        write.state.insert(job)
        if job.state == JobState.Available:
            write.notify.add(queue_channel(job.queue))
        self._retried(write, [job.id])
        return job

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        async with self._write() as write:
            entry = write.state.dlq.get(job_id)
            if entry is None:
                return None
            job = self._restore_from_dlq(
                write, entry, run_at=run_at, priority=priority, queue=queue
            )
        return job

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        async with self._write() as write:
            entries = self._dlq_matching(write.state, filter)
            for entry in sorted(entries, key=lambda entry: entry.job.id):
                self._restore_from_dlq(write, entry, run_at=None, priority=None, queue=None)
        return len(entries)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        async with self._write() as write:
            entries = self._dlq_matching(write.state, filter)
            for entry in entries:
                del write.state.dlq[entry.job.id]
        return len(entries)

    async def purge_dlq_job(self, job_id: int) -> bool:
        async with self._write() as write:
            found = write.state.dlq.pop(job_id, None) is not None
        return found

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        async with self._write() as write:
            cutoff = write.now - retention
            expired = sorted(
                (entry for entry in write.state.dlq.values() if entry.dlq_at <= cutoff),
                key=lambda entry: (entry.dlq_at, entry.job.id),
            )[: max(batch_size, 0)]
            for entry in expired:
                del write.state.dlq[entry.job.id]
        return len(expired)

    @staticmethod
    def _dlq_matching(state: EngineState, filter: DlqFilter) -> list[DlqEntry]:
        return [entry for entry in state.dlq.values() if _dlq_matches(entry, filter)]

    # ---------------------------------------------------------------- lifecycle
    async def reset(self) -> None:
        async with self._write() as write:
            write.state.clear()
            self._store.overrides.clear()

    async def close(self) -> None:
        self._closed = True
        await self._hub.close()
