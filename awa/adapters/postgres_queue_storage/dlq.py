"""The dead-letter queue of the queue-storage engine: failed jobs moved out of the
ring into ``dlq_entries``, and back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rows import dlq_from_row
from awa.adapters.postgres_queue_storage.admin_changes import AdminChanges
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter, job_filter
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.domain.admin_views import QueueStateBucket, first_minute, queue_state_buckets
from awa.domain.job import DlqEntry, JobRecord
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import DlqFilter, JobFilter


def _dlq_filter(filter: DlqFilter) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The WHERE clauses (fragment names of admin.sql) and parameters of ``filter``."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for key, value, clause in (
        ("kind", filter.kind, "job_kind_is"),
        ("queue", filter.queue, "job_queue_is"),
        ("tag", filter.tag, "job_tagged"),
    ):
        if value is not None:
            clauses.append(clause)
            params[key] = value
    if filter.before_dlq_at is not None:
        params["before_at"] = filter.before_dlq_at
    if filter.before_id is not None:
        params["before_id"] = filter.before_id
    if filter.before_dlq_at is not None and filter.before_id is not None:
        clauses.append("dlq_before")
    elif filter.before_dlq_at is not None:
        clauses.append("dlq_before_at")
    elif filter.before_id is not None:
        clauses.append("dlq_before_id")
    return tuple(clauses), params


def _dlq_entry(row: dict[str, Any]) -> DlqEntry:
    entry = dlq_from_row(row)
    return attrs.evolve(entry, job=attrs.evolve(entry.job, state=JobState.Failed))


class DeadLetters:
    """DLQ moves, reads and purges; each call is one transaction."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        changes: AdminChanges,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._changes = changes
        self._clock = clock

    async def _to_dlq(
        self, conn: DictConnection, writes: Writes, found: Resolved, reason: str
    ) -> DlqEntry | None:
        if found.job.state != JobState.Failed:
            return None
        ok = await self._facts.transition(conn, writes, found, found.job, dlq_reason=reason)
        if not ok:
            return None
        return DlqEntry(
            job=found.job, reason=reason, dlq_at=writes.now, original_run_lease=found.job.run_lease
        )

    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            found = (await self._facts.resolve(conn, [job_id])).get(job_id)
            entry = None if found is None else await self._to_dlq(conn, writes, found, reason)
            await self._facts.flush(conn, writes)
        return entry

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            failed = await self._facts.matching(conn, attrs.evolve(filter, state=JobState.Failed))
            moved = 0
            for r in failed:
                if await self._to_dlq(conn, writes, r, reason) is not None:
                    moved += 1
            await self._facts.flush(conn, writes)
        return moved

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        async with translated_errors(), self._connections.tx() as conn:
            clauses, params = _dlq_filter(filter)
            params["limit"] = max(limit, 0)
            rows = await self._sql.exec_filtered(conn, "list_dlq", clauses, params)
        return [_dlq_entry(row) for row in rows]

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        # The job filter's fragments name the columns dlq_entries shares with a job,
        # except the id cursor (job_id here).
        clauses, params = job_filter(filter)
        clauses = tuple("dlq_before_id" if c == "job_before" else c for c in clauses)
        params["limit"] = max(limit, 0)
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec_filtered(conn, "list_dead_lettered", clauses, params)
        return [_dlq_entry(row).job for row in rows]

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "get_dlq", job_id=job_id)
        return _dlq_entry(rows[0]) if rows else None

    async def dlq_depth(self, queue: str | None = None) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_depth", queue=queue)
        return int(rows[0]["n"]) if rows else 0

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        since = first_minute(self._clock.now(), window)
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_by_minute", since=since)
        return queue_state_buckets(rows)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_depth_by_queue")
        return [(row["queue"], int(row["n"])) for row in rows]

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_depth_by_kind")
        return [(row["kind"], row["queue"], int(row["n"])) for row in rows]

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
        await self._sql.exec(conn, "delete_dlq", job_id=row["job_id"])
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
        await self._facts.unique(conn, [(None, job)])
        await self._facts.place(conn, [(job, None if key is None else bytes(key))])
        writes.move(None, job)
        await self._changes.retried(conn, writes, [job.id])
        return job

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._sql.exec(conn, "lock_dlq", job_id=job_id)
            if not rows:
                return None
            job = await self._restore(
                conn, writes, rows[0], run_at=run_at, priority=priority, queue=queue
            )
            await self._facts.flush(conn, writes)
        return job

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._sql.exec_filtered(conn, "lock_matching_dlq", *_dlq_filter(filter))
            for row in rows:
                await self._restore(conn, writes, row, run_at=None, priority=None, queue=None)
            await self._facts.flush(conn, writes)
        return len(rows)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            clauses, params = _dlq_filter(filter)
            cur = await run(conn, self._sql.filtered("purge_dlq", clauses), params)
            return cur.rowcount

    async def purge_dlq_job(self, job_id: int) -> bool:
        async with translated_errors(), self._connections.tx() as conn:
            cur = await run(conn, self._sql["delete_dlq"], {"job_id": job_id})
            return cur.rowcount > 0

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        cutoff = self._clock.now() - retention
        async with translated_errors(), self._connections.tx() as conn:
            cur = await run(
                conn, self._sql["cleanup_dlq"], {"before": cutoff, "limit": max(batch_size, 0)}
            )
            return cur.rowcount
