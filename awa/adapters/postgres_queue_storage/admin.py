"""Operator reads of the queue-storage engine (jobs, queue overviews, time series) and
queue control (pause, resume, DLQ on/off)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.rows import state_buckets
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter, job_filter
from awa.adapters.postgres_queue_storage.snapshots import (
    PRUNED_COMPLETIONS_BUCKET,
    Resolved,
    minute_of,
)
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain.admin_views import (
    KindCounts,
    QueueDepth,
    QueueStateBucket,
    StateBucket,
    first_minute,
    queue_depths_from,
    queue_state_buckets,
)
from awa.domain.job import JobRecord, QueueCounts
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import JobFilter

#: list_jobs' cursor before the first page (above every bigint id) and its largest batch.
_NO_ID_ABOVE = 2**63 - 1
_MAX_ID_BATCH = 5000


class AdminReads:
    """Admin reads and queue control; each call is one transaction."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._clock = clock

    async def get_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._connections.tx() as conn:
            found = (await self._facts.resolve(conn, [job_id])).get(job_id)
        return None if found is None else found.job

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """Keyset pages of candidate ids newest first (``newest_job_ids``, index walks
        that stop at the page size), each resolved and filtered, until the page is full
        or no id is left; a batch that filtered too much doubles the next one."""
        if limit <= 0:
            return []
        found: list[JobRecord] = []
        before = _NO_ID_ABOVE if filter.before_id is None else filter.before_id
        batch = limit
        clauses, params = job_filter(attrs.evolve(filter, before_id=None))
        async with translated_errors(), self._connections.tx() as conn:
            while len(found) < limit:
                rows = await self._sql.exec(
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
                matched = await self._sql.exec_filtered(
                    conn, "jobs_among", clauses, {**params, "ids": ids}
                )
                found.extend(Resolved.from_row(row).job for row in matched)
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
        # One statement under its prepared generic plan: planning it (every ring partition,
        # several times over) cost 7-15 ms a call while a backlog drained, ten times its
        # run time. Read committed either way, so nothing needs a transaction around it.
        async with translated_errors(), self._connections.conn() as conn:
            for row in await self._sql.exec_generic(
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
                for head in (await self._facts.resolve(conn, sorted(edge))).values():
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
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "queue_depths")
        return queue_depths_from(rows)

    async def kind_counts(self) -> list[KindCounts]:
        hour_ago = self._clock.now() - timedelta(hours=1)
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "kind_counts", hour_ago=hour_ago)
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
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "finalized_timeseries", since=since)
        return state_buckets(rows)

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        since = first_minute(self._clock.now(), window)
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(
                conn, "finalized_by_queue", since=since, pruned_bucket=PRUNED_COMPLETIONS_BUCKET
            )
        return queue_state_buckets(rows)

    # ---------------------------------------------------------------- queue control
    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        async with translated_errors(), self._connections.tx() as conn:
            await self._sql.exec(
                conn, "pause_queue", queue=queue, now=self._clock.now(), paused_by=paused_by
            )

    async def resume_queue(self, queue: str) -> None:
        async with translated_errors(), self._connections.tx() as conn:
            await self._sql.exec(conn, "resume_queue", queue=queue)

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        async with translated_errors(), self._connections.tx() as conn:
            await self._sql.exec(conn, "set_queue_dlq", queue=queue, enabled=enabled)
