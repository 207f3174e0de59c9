"""Operator operations of the queue-storage engine: reads, queue control, retries, DLQ."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rows import dlq_from_row, state_buckets
from awa.adapters.postgres_queue_storage._base import (
    CANCEL_CHANNEL,
    DEFERRED,
    LIVE_STATES,
    QueueStorageBase,
    Resolved,
    Writes,
    minute_of,
)
from awa.adapters.postgres_queue_storage.statements import run
from awa.domain.admin_views import KindCounts, StateBucket
from awa.domain.callbacks import retry_changes
from awa.domain.job import DlqEntry, JobRecord, QueueCounts
from awa.domain.states import TERMINAL_STATES, JobState
from awa.ports.storage import DlqFilter, JobFilter

DRAINABLE_STATES = frozenset(
    {JobState.Scheduled, JobState.Available, JobState.Retryable, JobState.WaitingExternal}
)
#: A job whose head fact moved underneath an admin write is re-read this many times.
_RETRIES = 5

AdminDecide = Callable[[JobRecord], tuple[JobRecord | None, bool]]


def _job_params(filter: JobFilter) -> dict[str, Any]:
    """The parameters of ``job_filter``."""
    return {
        "kind": filter.kind,
        "queue": filter.queue,
        "state": None if filter.state is None else filter.state.sql_name,
        "tag": filter.tag,
        "before_id": filter.before_id,
    }


def _dlq_params(filter: DlqFilter) -> dict[str, Any]:
    """The parameters of ``dlq_filter``."""
    return {
        "kind": filter.kind,
        "queue": filter.queue,
        "tag": filter.tag,
        "before_at": filter.before_dlq_at,
        "before_id": filter.before_id,
    }


def _dlq_entry(row: dict[str, Any]) -> DlqEntry:
    entry = dlq_from_row(row)
    return attrs.evolve(entry, job=attrs.evolve(entry.job, state=JobState.Failed))


class AdminOps(QueueStorageBase):
    """Admin reads and writes; each write is one transaction."""

    # ---------------------------------------------------------------- reads
    async def get_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._tx() as conn:
            found = (await self._resolve(conn, [job_id])).get(job_id)
        return None if found is None else found.job

    async def _select(self, conn: DictConnection, filter: JobFilter) -> list[Resolved]:
        """Every job ``filter`` matches, in id order."""
        rows = await self._exec(conn, "matching_jobs", **_job_params(filter))
        return [Resolved.from_row(row) for row in rows]

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "list_jobs", **_job_params(filter), limit=max(limit, 0))
        return [Resolved.from_row(row).job for row in rows]

    async def queue_counts(self) -> list[QueueCounts]:
        """Counts come from the folded counters; "completed in the last hour" from the
        per-minute completion buckets plus an exact look at the partial boundary minute;
        the oldest available job from each lane's claim window (ADR 0006)."""
        now = self._clock.now()
        since = now - timedelta(hours=1)
        boundary = minute_of(since)
        edge_end = boundary + timedelta(minutes=1)
        per_queue: dict[str, dict[JobState, int]] = {}
        flags: dict[str, bool] = {}
        recent: Counter[str] = Counter()
        oldest: dict[str, datetime] = {}
        edge: set[int] = set()
        async with translated_errors(), self._tx() as conn:
            for row in await self._exec(
                conn, "queue_overview", full_from=edge_end, lo=since, hi=edge_end
            ):
                kind = row["kind"]
                if kind == "count":
                    counts = per_queue.setdefault(row["queue"], {s: 0 for s in JobState})
                    counts[JobState.parse(row["state"])] += int(row["n"])
                elif kind == "meta":
                    flags[row["queue"]] = bool(row["paused"])
                elif kind == "recent":
                    recent[row["queue"]] += int(row["n"])
                elif kind == "edge":
                    edge.add(int(row["job_id"]))
                elif row["oldest"] is not None:
                    oldest[row["queue"]] = row["oldest"]
            # Jobs completed inside the partial boundary minute count only while that
            # completion is still their current snapshot.
            if edge:
                for head in (await self._resolve(conn, sorted(edge))).values():
                    job = head.job
                    if (
                        job.state == JobState.Completed
                        and job.finalized_at is not None
                        and since < job.finalized_at < edge_end
                    ):
                        recent[job.queue] += 1
        names = {q for q, c in per_queue.items() if any(c.values())} | set(flags)
        result = []
        for name in sorted(names):
            counts = per_queue.get(name, {s: 0 for s in JobState})
            result.append(
                QueueCounts(
                    queue=name,
                    counts=counts,
                    paused=flags.get(name, False),
                    completed_last_hour=recent[name],
                    oldest_available_at=oldest.get(name) if counts[JobState.Available] else None,
                )
            )
        return result

    async def kind_counts(self) -> list[KindCounts]:
        hour_ago = self._clock.now() - timedelta(hours=1)
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "kind_counts", hour_ago=hour_ago)
        return sorted(
            (
                KindCounts(
                    kind=row["kind"],
                    job_count=int(row["job_count"]),
                    queue_count=int(row["queue_count"]),
                    completed_last_hour=int(row["completed_last_hour"]),
                )
                for row in rows
            ),
            key=lambda k: k.kind,
        )

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        since = self._clock.now() - window
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "finalized_timeseries", since=since)
        return state_buckets(rows)

    # ---------------------------------------------------------------- queue control
    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        async with translated_errors(), self._tx() as conn:
            await self._exec(
                conn, "pause_queue", queue=queue, now=self._clock.now(), paused_by=paused_by
            )

    async def resume_queue(self, queue: str) -> None:
        async with translated_errors(), self._tx() as conn:
            await self._exec(conn, "resume_queue", queue=queue)

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        async with translated_errors(), self._tx() as conn:
            await self._exec(conn, "set_queue_dlq", queue=queue, enabled=enabled)

    # ---------------------------------------------------------------- generic admin change
    async def _change(
        self,
        conn: DictConnection,
        writes: Writes,
        job_id: int,
        decide: AdminDecide,
    ) -> JobRecord | None:
        """Apply ``decide(job) -> (new | None, keep)`` to one job, re-reading if its head
        fact moved underneath. Returns the resulting snapshot (or the unchanged one)."""
        for _ in range(_RETRIES):
            found = (await self._resolve(conn, [job_id])).get(job_id)
            if found is None:
                return None
            new, keep = decide(found.job)
            if keep:
                return found.job
            async with conn.transaction():
                ok = await self._transition(conn, writes, found, new)
            if ok:
                if found.job.state in LIVE_STATES and new is not None:
                    writes.notify.add(
                        (
                            CANCEL_CHANNEL,
                            json.dumps({"job_id": job_id, "run_lease": found.job.run_lease}),
                        )
                    )
                return new
        return None

    def _cancelled(self, now: datetime) -> AdminDecide:
        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            if job.state.is_terminal:
                return None, True
            return attrs.evolve(job, state=JobState.Cancelled, finalized_at=now), False

        return decide

    async def drain_queue(self, queue: str) -> int:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            found = await self._select(conn, JobFilter(queue=queue))
            # Every lane first, in key order: the cancels below then take no lane lock out
            # of the order every retiring writer uses.
            await self._mark_retiring(conn, found)
            count = 0
            for r in found:
                if r.job.state not in DRAINABLE_STATES:
                    continue
                result = await self._change(conn, writes, r.job.id, self._cancelled(writes.now))
                if result is not None and result.state == JobState.Cancelled:
                    count += 1
            await self._flush(conn, writes)
        return count

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            result = await self._change(conn, writes, job_id, self._cancelled(writes.now))
            await self._flush(conn, writes)
        return result

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        async with translated_errors(), self._tx() as conn:
            holder = await self._exec(conn, "unique_holder", key=unique_key)
            if not holder:
                return None
            found = (await self._resolve(conn, [holder[0]["job_id"]])).get(holder[0]["job_id"])
            if found is None or found.job.state.is_terminal:
                return None
            writes = Writes(self._clock.now())
            result = await self._change(conn, writes, found.job.id, self._cancelled(writes.now))
            await self._flush(conn, writes)
        return result

    def _operator_retry(self, now: datetime) -> AdminDecide:
        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            if job.state in TERMINAL_STATES:
                new = attrs.evolve(
                    job, state=JobState.Available, run_at=now, attempt=0, finalized_at=None
                )
                return new, False
            if job.state in DEFERRED:
                return attrs.evolve(job, state=JobState.Available, run_at=now), False
            if job.state == JobState.WaitingExternal:
                return attrs.evolve(job, **retry_changes(now)), False
            return None, True

        return decide

    async def retry_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            result = await self._change(conn, writes, job_id, self._operator_retry(writes.now))
            await self._flush(conn, writes)
        return result

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            failed = await self._select(conn, attrs.evolve(filter, state=JobState.Failed))
            retried = []
            for r in failed:
                result = await self._change(
                    conn, writes, r.job.id, self._operator_retry(writes.now)
                )
                if result is not None:
                    retried.append(result)
            await self._flush(conn, writes)
        return retried

    async def _delete_where(self, filter: JobFilter, ids: Sequence[int] | None) -> int:
        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            return None, job.state in LIVE_STATES

        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            if ids is None:
                found = await self._select(conn, filter)
            else:
                found = list((await self._resolve(conn, sorted(set(ids)))).values())
            count = 0
            for r in found:
                if r.job.state in LIVE_STATES:
                    continue
                before = writes.counts.copy()
                await self._change(conn, writes, r.job.id, decide)
                if writes.counts != before:
                    count += 1
            await self._flush(conn, writes)
        return count

    async def discard_failed(self, kind: str) -> int:
        return await self._delete_where(JobFilter(kind=kind, state=JobState.Failed), None)

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._delete_where(JobFilter(), list(job_ids))

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        now = self._clock.now()

        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            return None, not job.state.is_terminal

        async with translated_errors(), self._tx() as conn:
            writes = Writes(now)
            due = await self._exec(
                conn,
                "retention_due",
                completed_before=now - completed,
                failed_before=now - failed,
                limit=max(batch_size, 0),
            )
            rows = [Resolved.from_row(row) for row in due]
            for r in rows:
                await self._change(conn, writes, r.job.id, decide)
            await self._flush(conn, writes)
            # CEL expressions of callbacks that ended without a resolve (ADR 0004, "CEL").
            await self._exec(
                conn,
                "cleanup_callback_expressions",
                schema=self._schema,
                before=now - timedelta(days=1),
                limit=max(batch_size, 0),
            )
        return len(rows)

    # ---------------------------------------------------------------- DLQ
    async def _to_dlq(
        self, conn: DictConnection, writes: Writes, found: Resolved, reason: str
    ) -> DlqEntry | None:
        if found.job.state != JobState.Failed:
            return None
        ok = await self._transition(conn, writes, found, found.job, dlq_reason=reason)
        if not ok:
            return None
        return DlqEntry(
            job=found.job, reason=reason, dlq_at=writes.now, original_run_lease=found.job.run_lease
        )

    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            found = (await self._resolve(conn, [job_id])).get(job_id)
            entry = None if found is None else await self._to_dlq(conn, writes, found, reason)
            await self._flush(conn, writes)
        return entry

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            failed = await self._select(conn, attrs.evolve(filter, state=JobState.Failed))
            moved = 0
            for r in failed:
                if await self._to_dlq(conn, writes, r, reason) is not None:
                    moved += 1
            await self._flush(conn, writes)
        return moved

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "list_dlq", **_dlq_params(filter), limit=max(limit, 0))
        return [_dlq_entry(row) for row in rows]

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "get_dlq", job_id=job_id)
        return _dlq_entry(rows[0]) if rows else None

    async def dlq_depth(self, queue: str | None = None) -> int:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "dlq_depth", queue=queue)
        return int(rows[0]["n"]) if rows else 0

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "dlq_depth_by_queue")
        return [(row["queue"], int(row["n"])) for row in rows]

    async def _restore(
        self,
        conn: DictConnection,
        writes: Writes,
        row: dict[str, Any],
        *,
        run_at: datetime | None,
        priority: int | None,
        queue: str | None,
    ) -> JobRecord:
        await self._exec(conn, "delete_dlq", job_id=row["job_id"])
        held = _dlq_entry(row).job
        job = attrs.evolve(
            held,
            state=JobState.Available if run_at is None else JobState.Scheduled,
            run_at=writes.now if run_at is None else run_at,
            attempt=0,
            run_lease=0,
            finalized_at=None,
            priority=held.priority if priority is None else priority,
            queue=held.queue if queue is None else queue,
        )
        key = row.get("ordering_key")
        await self._unique(conn, [(None, job)])
        await self._place(conn, [(job, None if key is None else bytes(key))])
        writes.move(None, job)
        return job

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._exec(conn, "lock_dlq", job_id=job_id)
            if not rows:
                return None
            job = await self._restore(
                conn, writes, rows[0], run_at=run_at, priority=priority, queue=queue
            )
            await self._flush(conn, writes)
        return job

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._exec(conn, "lock_matching_dlq", **_dlq_params(filter))
            for row in rows:
                await self._restore(conn, writes, row, run_at=None, priority=None, queue=None)
            await self._flush(conn, writes)
        return len(rows)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        async with translated_errors(), self._tx() as conn:
            cur = await run(conn, self._sql["purge_dlq"], _dlq_params(filter))
            return cur.rowcount

    async def purge_dlq_job(self, job_id: int) -> bool:
        async with translated_errors(), self._tx() as conn:
            cur = await run(conn, self._sql["delete_dlq"], {"job_id": job_id})
            return cur.rowcount > 0

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        cutoff = self._clock.now() - retention
        async with translated_errors(), self._tx() as conn:
            cur = await run(
                conn, self._sql["cleanup_dlq"], {"before": cutoff, "limit": max(batch_size, 0)}
            )
            return cur.rowcount

    # ---------------------------------------------------------------- lifecycle
    async def reset(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting (``reset``)."""
        async with translated_errors(), self._tx() as conn:
            await run(conn, self._sql["reset"])
        self._shards.clear()
