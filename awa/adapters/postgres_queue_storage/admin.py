"""Operator operations of the queue-storage engine: reads, queue control, retries, DLQ."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters._pg.decode import fetch_decodable, fetchone_decodable
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rows import dlq_from_row, state_buckets
from awa.adapters.postgres_queue_storage._base import (
    CANCEL_CHANNEL,
    QueueStorageBase,
    Resolved,
    Writes,
    minute_of,
)
from awa.domain import lifecycle
from awa.domain.admin_views import KindCounts, QueueDepth, StateBucket, queue_depths_from
from awa.domain.job import DlqEntry, JobRecord, QueueCounts
from awa.domain.policies import RetentionFloor
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.storage import DlqFilter, JobFilter

DRAINABLE_STATES = lifecycle.DRAINABLE_STATES
#: A job whose head fact moved underneath an admin write is re-read this many times.
_RETRIES = 5
#: list_jobs' cursor before the first page (above every bigint id) and its largest batch.
_NO_ID_ABOVE = 2**63 - 1
_MAX_ID_BATCH = 5000

AdminDecide = Callable[[JobRecord], tuple[JobRecord | None, bool]]


def _job_where(filter: JobFilter) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if filter.kind is not None:
        clauses.append("kind = %s")
        params.append(filter.kind)
    if filter.queue is not None:
        clauses.append("queue = %s")
        params.append(filter.queue)
    if filter.state is not None:
        clauses.append("state = %s::awa.job_state")
        params.append(filter.state.sql_name)
    if filter.tag is not None:
        clauses.append("%s = ANY(tags)")
        params.append(filter.tag)
    if filter.before_id is not None:
        clauses.append("id < %s")
        params.append(filter.before_id)
    return (" AND ".join(clauses) or "true"), params


def _dlq_where(filter: DlqFilter) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if filter.kind is not None:
        clauses.append("kind = %s")
        params.append(filter.kind)
    if filter.queue is not None:
        clauses.append("queue = %s")
        params.append(filter.queue)
    if filter.tag is not None:
        clauses.append("%s = ANY(tags)")
        params.append(filter.tag)
    if filter.before_dlq_at is not None and filter.before_id is not None:
        clauses.append("(dlq_at, job_id) < (%s, %s)")
        params.extend([filter.before_dlq_at, filter.before_id])
    elif filter.before_dlq_at is not None:
        clauses.append("dlq_at < %s")
        params.append(filter.before_dlq_at)
    elif filter.before_id is not None:
        clauses.append("job_id < %s")
        params.append(filter.before_id)
    return (" AND ".join(clauses) or "true"), params


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

    async def _select(
        self, conn: DictConnection, filter: JobFilter, *, tail: str = "", extra: Sequence[Any] = ()
    ) -> list[Resolved]:
        where, params = _job_where(filter)
        cur = await conn.execute(
            f"SELECT * FROM {self._qschema}.jobs_resolved WHERE {where} {tail}".encode(),
            [*params, *extra],
        )
        return [Resolved.from_row(row) for row in await fetch_decodable(cur)]

    @property
    def _qschema(self) -> str:
        return '"' + self._schema.replace('"', '""') + '"'

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """Keyset pages of candidate ids newest first (``newest_job_ids``, index walks
        that stop at the page size), each resolved and filtered, until the page is full
        or no id is left; a batch that filtered too much doubles the next one."""
        if limit <= 0:
            return []
        found: list[JobRecord] = []
        before = _NO_ID_ABOVE if filter.before_id is None else filter.before_id
        batch = limit
        async with translated_errors(), self._tx() as conn:
            while len(found) < limit:
                rows = await self._exec(
                    conn,
                    "newest_job_ids",
                    before=before,
                    kind=filter.kind,
                    queue=filter.queue,
                    tag=filter.tag,
                    state=None if filter.state is None else filter.state.sql_name,
                    limit=batch,
                )
                ids = [row["job_id"] for row in rows]
                if not ids:
                    break
                matched = await self._select(
                    conn,
                    attrs.evolve(filter, before_id=None),
                    tail="AND id = ANY(%s::bigint[]) ORDER BY id DESC",
                    extra=[ids],
                )
                found.extend(r.job for r in matched)
                if len(ids) < batch:
                    break
                before = ids[-1]
                batch = min(batch * 2, _MAX_ID_BATCH)
        return found[:limit]

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

    async def queue_depths(self) -> list[QueueDepth]:
        """Available jobs from the lane-head cursors, the other states from the folded
        counters (statement ``queue_depths``); no job row is counted."""
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "queue_depths")
        return queue_depths_from(rows)

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
            await conn.execute(
                "INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by) "
                "VALUES (%s, true, %s, %s) ON CONFLICT (queue) DO UPDATE SET "
                "paused = true, paused_at = EXCLUDED.paused_at, paused_by = EXCLUDED.paused_by "
                "WHERE NOT awa.queue_meta.paused",
                (queue, self._clock.now(), paused_by),
            )

    async def resume_queue(self, queue: str) -> None:
        async with translated_errors(), self._tx() as conn:
            await conn.execute(
                "UPDATE awa.queue_meta SET paused = false, paused_at = NULL, paused_by = NULL "
                "WHERE queue = %s AND paused",
                (queue,),
            )

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        async with translated_errors(), self._tx() as conn:
            await conn.execute(
                "INSERT INTO awa.queue_meta (queue, dlq_enabled) VALUES (%s, %s) "
                "ON CONFLICT (queue) DO UPDATE SET dlq_enabled = EXCLUDED.dlq_enabled",
                (queue, enabled),
            )

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
            cancel = lifecycle.operator_cancel(now)
            if not cancel.applies(job.state):
                return None, True
            return cancel.apply(job), False

        return decide

    async def drain_queue(self, queue: str) -> int:
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            found = await self._select(conn, JobFilter(queue=queue), tail="ORDER BY id")
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
            transition = lifecycle.operator_retry(job.state, now)
            if transition is None:
                return None, True
            return transition.apply(job), False

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
            failed = await self._select(
                conn, attrs.evolve(filter, state=JobState.Failed), tail="ORDER BY id"
            )
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
                found = await self._select(conn, filter, tail="ORDER BY id")
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
        floor = RetentionFloor(completed=completed, failed=failed)

        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            return None, not job.state.is_terminal

        async with translated_errors(), self._tx() as conn:
            writes = Writes(now)
            cur = await conn.execute(
                f"SELECT * FROM {self._qschema}.jobs_resolved WHERE "
                "(state = 'completed' AND finalized_at <= %s) OR "
                "(state = 'cancelled' AND finalized_at <= %s) OR "
                "(state = 'failed' AND finalized_at <= %s) "
                "ORDER BY finalized_at, id LIMIT %s".encode(),
                (
                    floor.cutoff(JobState.Completed, now),
                    floor.cutoff(JobState.Cancelled, now),
                    floor.cutoff(JobState.Failed, now),
                    max(batch_size, 0),
                ),
            )
            rows = [Resolved.from_row(row) for row in await fetch_decodable(cur)]
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
            failed = await self._select(
                conn, attrs.evolve(filter, state=JobState.Failed), tail="ORDER BY id"
            )
            moved = 0
            for r in failed:
                if await self._to_dlq(conn, writes, r, reason) is not None:
                    moved += 1
            await self._flush(conn, writes)
        return moved

    async def _dlq_rows(
        self, conn: DictConnection, filter: DlqFilter, tail: str = "", extra: Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        where, params = _dlq_where(filter)
        cur = await conn.execute(
            f"SELECT * FROM {self._qschema}.dlq_entries WHERE {where} {tail}".encode(),
            [*params, *extra],
        )
        return await fetch_decodable(cur)

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        async with translated_errors(), self._tx() as conn:
            rows = await self._dlq_rows(
                conn, filter, "ORDER BY dlq_at DESC, job_id DESC LIMIT %s", [max(limit, 0)]
            )
        return [_dlq_entry(row) for row in rows]

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT * FROM {self._qschema}.dlq_entries WHERE job_id = %s".encode(), (job_id,)
            )
            row = await fetchone_decodable(cur)
        return None if row is None else _dlq_entry(row)

    async def dlq_depth(self, queue: str | None = None) -> int:
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT count(*) AS n FROM {self._qschema}.dlq_entries "
                "WHERE %s::text IS NULL OR queue = %s".encode(),
                (queue, queue),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT queue, count(*) AS n FROM {self._qschema}.dlq_entries "
                "GROUP BY queue ORDER BY queue".encode()
            )
            rows = await cur.fetchall()
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
        await conn.execute(
            f"DELETE FROM {self._qschema}.dlq_entries WHERE job_id = %s".encode(),
            (row["job_id"],),
        )
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
            rows = await self._dlq_rows(conn, DlqFilter(), "AND job_id = %s FOR UPDATE", [job_id])
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
            rows = await self._dlq_rows(conn, filter, "ORDER BY job_id FOR UPDATE")
            for row in rows:
                await self._restore(conn, writes, row, run_at=None, priority=None, queue=None)
            await self._flush(conn, writes)
        return len(rows)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        where, params = _dlq_where(filter)
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"DELETE FROM {self._qschema}.dlq_entries WHERE {where}".encode(), params
            )
            return cur.rowcount

    async def purge_dlq_job(self, job_id: int) -> bool:
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"DELETE FROM {self._qschema}.dlq_entries WHERE job_id = %s".encode(), (job_id,)
            )
            return cur.rowcount > 0

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        cutoff = self._clock.now() - retention
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"DELETE FROM {self._qschema}.dlq_entries WHERE job_id IN ("
                f"SELECT job_id FROM {self._qschema}.dlq_entries WHERE dlq_at <= %s "
                "ORDER BY dlq_at, job_id LIMIT %s)".encode(),
                (cutoff, max(batch_size, 0)),
            )
            return cur.rowcount

    # ---------------------------------------------------------------- lifecycle
    async def reset(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting.

        ``DELETE`` rather than ``TRUNCATE``: truncating the ring's many partitions costs a
        new file per table, far more than deleting the few rows tests leave behind.
        """
        s = self._qschema
        tables = [
            "ready_entries",
            "claims",
            "closures",
            "tombstones",
            "done_entries",
            "leases",
            "deferred_jobs",
            "dlq_entries",
            "lanes",
            "claim_heads",
            "queue_counts",
            "completions",
            "queue_prune_stats",
        ]
        deletes = ", ".join(
            f"d{i} AS (DELETE FROM {name})"
            for i, name in enumerate(
                [f"{s}.{t}" for t in tables] + ["awa.job_unique_claims", "awa.queue_meta"]
            )
        )
        async with translated_errors(), self._tx() as conn:
            await conn.execute(f"WITH {deletes} SELECT 1".encode())
        self._shards.clear()
