"""Operator reads and writes of the canonical engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import errors as pg_errors

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.errors import is_unique_claim_violation
from awa.adapters._pg.rows import job_from_row, state_buckets
from awa.adapters.postgres_canonical.base import AnyConnection, EngineBase
from awa.domain import lifecycle
from awa.domain.admin_views import (
    KindCounts,
    QueueDepth,
    QueueStateBucket,
    StateBucket,
    first_minute,
    queue_depths_from,
    queue_state_buckets,
)
from awa.domain.job import JobRecord, QueueCounts, RunLease
from awa.domain.states import LIVE_STATES, TERMINAL_STATES, JobState
from awa.ports.storage import JobFilter, VanishedStep


def _filter_params(filter: JobFilter) -> dict[str, Any]:
    return {
        "kind": filter.kind,
        "queue": filter.queue,
        "state": None if filter.state is None else filter.state.sql_name,
        "tag": filter.tag,
        "before_id": filter.before_id,
    }


def _kind_counts(row: Mapping[str, Any]) -> KindCounts:
    return KindCounts(
        kind=row["kind"],
        job_count=int(row["job_count"]),
        queue_count=int(row["queue_count"]),
        completed_last_hour=int(row["completed_last_hour"]),
    )


class AdminOps(EngineBase):
    """Admin reads, queue control and operator job control."""

    # ---------------------------------------------------------------- reads
    async def get_job(self, job_id: int) -> JobRecord | None:
        """The job, or ``None`` (DLQ entries are not jobs)."""
        async with self._connection() as conn:
            row = await self._one(conn, "get_job", {"id": job_id})
        return None if row is None else job_from_row(row)

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """Matching jobs, highest id first."""
        if limit <= 0:
            return []
        async with self._connection() as conn:
            rows = await self._all(conn, "list_jobs", {**_filter_params(filter), "limit": limit})
        return [job_from_row(row) for row in rows]

    async def queue_counts(self) -> list[QueueCounts]:
        """Exact per-state counts for every queue with jobs or settings, by name."""
        now = self._clock.now()
        async with self._connection() as conn:
            rows = await self._all(conn, "queue_counts", {"hour_ago": now - timedelta(hours=1)})
        result = []
        for row in rows:
            counts = {state: 0 for state in JobState}
            for label, count in row["counts"].items():
                counts[JobState.parse(label)] = int(count)
            result.append(
                QueueCounts(
                    queue=row["queue"],
                    counts=counts,
                    paused=row["paused"],
                    completed_last_hour=int(row["completed_last_hour"]),
                    oldest_available_at=row["oldest_available_at"],
                )
            )
        # Python string order (code points), not the database collation.
        return sorted(result, key=lambda counts: counts.queue)

    async def queue_depths(self) -> list[QueueDepth]:
        """Live rows per queue and state along the ``(queue, state)`` index; finished
        rows are never read (the canonical engine keeps no counters or cursors)."""
        async with self._connection() as conn:
            rows = await self._all(conn, "queue_depths", {})
        return queue_depths_from(rows)

    async def kind_counts(self) -> list[KindCounts]:
        """Per-kind totals by one GROUP BY over the jobs table."""
        hour_ago = self._clock.now() - timedelta(hours=1)
        async with self._connection() as conn:
            rows = await self._all(conn, "kind_counts", {"hour_ago": hour_ago})
        return sorted((_kind_counts(row) for row in rows), key=lambda k: k.kind)

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        """Terminal jobs per minute and state since ``now - window``."""
        since = self._clock.now() - window
        async with self._connection() as conn:
            rows = await self._all(conn, "finalized_timeseries", {"since": since})
        return state_buckets(rows)

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        """Terminal jobs per minute, queue and state from the rows still held."""
        since = first_minute(self._clock.now(), window)
        async with self._connection() as conn:
            rows = await self._all(conn, "finalized_by_queue", {"since": since})
        return queue_state_buckets(rows)

    # ---------------------------------------------------------------- queue control
    async def _execute(self, name: str, params: Mapping[str, Any]) -> None:
        async with self._connection() as conn:
            await self._all(conn, name, params)

    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        """Stop claims from ``queue``; pausing a paused queue keeps who paused it and when."""
        await self._execute(
            "pause_queue", {"queue": queue, "now": self._clock.now(), "paused_by": paused_by}
        )

    async def resume_queue(self, queue: str) -> None:
        """Allow claims again."""
        await self._execute("resume_queue", {"queue": queue, "now": self._clock.now()})

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        """Opt ``queue`` in or out of dead-letter routing."""
        await self._execute(
            "set_queue_dlq", {"queue": queue, "enabled": enabled, "now": self._clock.now()}
        )

    async def drain_queue(self, queue: str) -> int:
        """Cancel every pending job of ``queue``; waiting attempts' workers are told."""
        now = self._clock.now()
        drain = lifecycle.drain(now)
        states = sorted(state.sql_name for state in drain.applies_to)
        async with self._transaction() as conn:
            rows = await self._all(conn, "drain_candidates", {"queue": queue, "states": states})
            leases = [RunLease(row["id"], row["run_lease"]) for row in rows]
            applied, _ = await self._apply(conn, [(lease, drain) for lease in leases], now=now)
            for row in rows:
                if JobState.parse(row["state"]) in LIVE_STATES:
                    await self._notify_cancel(conn, row["id"], row["run_lease"])
            await self._cancel_dependents(conn, [job_id for job_id, _ in applied], now)
        return len(applied)

    async def _cancel_dependents(
        self, conn: AnyConnection, cancelled: list[int], now: datetime
    ) -> None:
        """Cancel the jobs waiting on the jobs an operator just cancelled (ADR 0032)."""
        done = [(job_id, JobState.Cancelled) for job_id in cancelled]
        await self._change_jobs(conn, await pg_dependencies.finished(conn, done, now), now)

    # ---------------------------------------------------------------- job control
    async def _cancel_locked(
        self, conn: AnyConnection, row: Mapping[str, Any], now: datetime
    ) -> JobRecord:
        job = job_from_row(row)
        cancel = lifecycle.operator_cancel(now)
        if not cancel.applies(job.state):
            return job
        cancelled = await self._apply_locked(conn, row, cancel, now)
        if job.state in LIVE_STATES:
            await self._notify_cancel(conn, job.id, job.run_lease)
        await self._cancel_dependents(conn, [job.id], now)
        return cancelled

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        """Cancel a non-terminal job (a live attempt is told via ``awa:cancel``)."""
        now = self._clock.now()
        async with self._transaction() as conn:
            row = await self._one(conn, "lock_job", {"id": job_id})
            if row is None:
                return None
            return await self._cancel_locked(conn, row, now)

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        """Cancel the non-terminal job holding ``unique_key``."""
        now = self._clock.now()
        async with self._transaction() as conn:
            holder = await self._one(conn, "unique_holder", {"key": unique_key})
            if holder is None:
                return None
            row = await self._one(conn, "lock_job", {"id": holder["job_id"]})
            if row is None or JobState.parse(row["state"]) in TERMINAL_STATES:
                return None
            return await self._cancel_locked(conn, row, now)

    async def _operator_retry(
        self, conn: AnyConnection, row: Mapping[str, Any], now: datetime
    ) -> JobRecord:
        job = job_from_row(row)
        retried = lifecycle.operator_retry(job.state, now)
        if retried is None:
            return job
        try:
            async with self._atomic(conn):
                after = await self._apply_locked(conn, row, retried, now)
        except pg_errors.UniqueViolation as exc:
            if not is_unique_claim_violation(exc):
                raise
            raise await self._conflict(conn, [job.unique_key]) from exc
        if job.state in TERMINAL_STATES:
            await self._retried(conn, [job.id], now)
        return after

    async def retry_job(self, job_id: int) -> JobRecord | None:
        """Operator retry of one job (see the port for which states change)."""
        now = self._clock.now()
        async with self._transaction() as conn:
            row = await self._one(conn, "lock_job", {"id": job_id})
            if row is None:
                return None
            return await self._operator_retry(conn, row, now)

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        """Operator retry of every failed job matching ``filter``, atomically, by id."""
        now = self._clock.now()
        retried = []
        async with self._transaction() as conn:
            for row in await self._all(conn, "failed_ids", _filter_params(filter)):
                locked = await self._one(conn, "lock_job", {"id": row["id"]})
                if locked is not None:
                    retried.append(await self._operator_retry(conn, locked, now))
        return retried

    async def pruned_failed_count(self, queue: str) -> int | None:
        return None  # retention deletes rows without counting them

    async def discard_failed(self, kind: str) -> int:
        """Delete every failed job of ``kind``."""
        async with self._connection() as conn:
            rows = await self._all(conn, "discard_failed", {"kind": kind})
        return len(rows)

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        """Delete jobs by id, except live attempts; the children still waiting on a deleted
        job have their policies applied as for a cancel (ADR 0032)."""
        ids = list(job_ids)
        if not ids:
            return 0
        now = self._clock.now()
        async with self._transaction() as conn:
            rows = await self._all(conn, "delete_jobs", {"ids": ids})
            gone = [(int(row["id"]), JobState.parse(row["state"])) for row in rows]
            await self._cancel_dependents(conn, await pg_dependencies.deleted(conn, gone), now)
        return len(rows)

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        now = self._clock.now()
        async with self._transaction() as conn:
            following, gone = await pg_dependencies.vanished(
                conn, after=after, limit=limit, now=now, seen_before=seen_before
            )
            await self._cancel_dependents(conn, gone, now)
        return VanishedStep(following, len(gone))

    # ---------------------------------------------------------------- lifecycle
    async def reset(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting."""
        await self._execute("reset", {})
