"""Dead-letter queue operations of the canonical engine."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg import errors as pg_errors

from awa.adapters._pg.errors import is_unique_claim_violation
from awa.adapters._pg.rows import dlq_from_row, job_from_row
from awa.adapters.postgres_canonical.base import AnyConnection, EngineBase
from awa.domain.admin_views import QueueStateBucket, first_minute, queue_state_buckets
from awa.domain.job import DlqEntry, JobRecord
from awa.domain.validation import validate_priority, validate_queue
from awa.ports.storage import DlqFilter, JobFilter


def _dlq_params(filter: DlqFilter) -> dict[str, Any]:
    return {
        "kind": filter.kind,
        "queue": filter.queue,
        "tag": filter.tag,
        "before_at": filter.before_dlq_at,
        "before_id": filter.before_id,
    }


class DlqOps(EngineBase):
    """Move failed jobs into the DLQ, list, retry and purge them."""

    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        """Hold a failed job in the DLQ; ``None`` if it is not a failed job."""
        params = {"ids": [job_id], "reasons": [reason], "now": self._clock.now()}
        async with self._connection() as conn:
            row = await self._one(conn, "move_to_dlq", params)
        return None if row is None else dlq_from_row(row)

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        """Move every failed job matching ``filter`` into the DLQ; returns how many."""
        now = self._clock.now()
        params = {"kind": filter.kind, "queue": filter.queue, "tag": filter.tag}
        async with self._transaction() as conn:
            ids = [row["id"] for row in await self._all(conn, "failed_ids_for_dlq", params)]
            if not ids:
                return 0
            moved = await self._all(
                conn, "move_to_dlq", {"ids": ids, "reasons": [reason] * len(ids), "now": now}
            )
        return len(moved)

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        """Newest first by ``(dlq_at, job id)``, after the optional cursor."""
        if limit <= 0:
            return []
        async with self._connection() as conn:
            rows = await self._all(conn, "list_dlq", {**_dlq_params(filter), "limit": limit})
        return [dlq_from_row(row) for row in rows]

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """DLQ'd jobs matching ``filter``, highest id first."""
        if limit <= 0:
            return []
        params = {
            "kind": filter.kind,
            "queue": filter.queue,
            "state": None if filter.state is None else filter.state.sql_name,
            "tag": filter.tag,
            "before_id": filter.before_id,
            "limit": limit,
        }
        async with self._connection() as conn:
            rows = await self._all(conn, "list_dead_lettered", params)
        return [dlq_from_row(row).job for row in rows]

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        """One DLQ entry by job id."""
        async with self._connection() as conn:
            row = await self._one(conn, "get_dlq", {"id": job_id})
        return None if row is None else dlq_from_row(row)

    async def dlq_depth(self, queue: str | None = None) -> int:
        """How many entries the DLQ holds (for one queue, or overall)."""
        async with self._connection() as conn:
            row = await self._one(conn, "dlq_depth", {"queue": queue})
        return 0 if row is None else int(row["n"])

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        """DLQ entries per minute their job failed and queue."""
        since = first_minute(self._clock.now(), window)
        async with self._connection() as conn:
            rows = await self._all(conn, "dlq_by_minute", {"since": since})
        return queue_state_buckets(rows)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        """``(queue, depth)`` for every queue with DLQ entries, by queue name."""
        async with self._connection() as conn:
            rows = await self._all(conn, "dlq_depth_by_queue", {})
        return sorted((row["queue"], int(row["n"])) for row in rows)

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        """``(kind, queue, depth)`` for every kind and queue with DLQ entries."""
        async with self._connection() as conn:
            rows = await self._all(conn, "dlq_depth_by_kind", {})
        return sorted((row["kind"], row["queue"], int(row["n"])) for row in rows)

    async def _restore(
        self,
        conn: AnyConnection,
        job_id: int,
        *,
        now: datetime,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        params = {
            "id": job_id,
            "now": now,
            "run_at": run_at,
            "priority": priority,
            "queue": queue,
        }
        try:
            async with self._atomic(conn):
                row = await self._one(conn, "retry_from_dlq", params)
        except pg_errors.UniqueViolation as exc:
            if not is_unique_claim_violation(exc):
                raise
            held = await self._one(conn, "get_dlq", {"id": job_id})
            key = None if held is None else held["unique_key"]
            raise await self._conflict(conn, [key]) from exc
        if row is None:
            return None
        await self._retried(conn, [job_id], now)
        return job_from_row(row)

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        """Re-enqueue a held job under its id with a fresh attempt budget."""
        if priority is not None:
            validate_priority(priority)
        if queue is not None:
            validate_queue(queue)
        now = self._clock.now()
        async with self._transaction() as conn:
            return await self._restore(
                conn, job_id, now=now, run_at=run_at, priority=priority, queue=queue
            )

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        """Re-enqueue every matching entry, atomically, by job id."""
        now = self._clock.now()
        restored = 0
        async with self._transaction() as conn:
            for row in await self._all(conn, "matching_dlq_ids", _dlq_params(filter)):
                job = await self._restore(conn, row["job_id"], now=now)
                restored += job is not None
        return restored

    async def purge_dlq(self, filter: DlqFilter) -> int:
        """Delete matching DLQ entries."""
        async with self._transaction() as conn:
            ids = [
                row["job_id"]
                for row in await self._all(conn, "matching_dlq_ids", _dlq_params(filter))
            ]
            if not ids:
                return 0
            rows = await self._all(conn, "purge_dlq_ids", {"ids": ids})
        return len(rows)

    async def purge_dlq_job(self, job_id: int) -> bool:
        """Delete one DLQ entry; whether it existed."""
        async with self._connection() as conn:
            rows = await self._all(conn, "purge_dlq_ids", {"ids": [job_id]})
        return bool(rows)
