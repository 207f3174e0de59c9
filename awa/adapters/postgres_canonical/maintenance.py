"""Maintenance operations of the canonical engine: promotion, rescue and cleanup."""

from __future__ import annotations

from datetime import timedelta

from psycopg.rows import DictRow

from awa.adapters.postgres_canonical.base import EngineBase, attempt_facts
from awa.domain import lifecycle
from awa.domain.job import RunLease
from awa.domain.lifecycle import Rescue
from awa.domain.policies import RetentionFloor
from awa.domain.states import JobState
from awa.ports.storage import Rescued


class MaintenanceOps(EngineBase):
    """Leader duties: promote due work, rescue lost attempts, delete expired history."""

    async def promote_due(self, *, limit: int = 4096) -> int:
        """Make due scheduled/retryable jobs available, oldest ``run_at`` first."""
        if limit <= 0:
            return 0
        async with self._connection() as conn:
            rows = await self._all(conn, "promote_due", {"now": self._clock.now(), "limit": limit})
        return len(rows)

    async def _rescue(self, name: str, params: dict[str, object], kind: Rescue) -> list[Rescued]:
        now = self._clock.now()
        async with self._transaction() as conn:
            # Candidates are locked (skipping rows a finalizer holds) and ordered by id.
            candidates: list[DictRow] = await self._all(conn, name, {"now": now, **params})
            items = [
                (
                    RunLease(row["id"], row["run_lease"]),
                    lifecycle.rescue(
                        kind,
                        attempt_facts(row),
                        now=now,
                        backoff=self._backoff,
                        policies=self._policies,
                    ),
                )
                for row in candidates
            ]
            # One statement closes every candidate, one more holds those routed to the DLQ.
            applied, held = await self._apply(conn, items, now=now, effects=True)
        return [
            Rescued(
                lease=lease,
                new_state=t.target(JobState.parse(row["state"])),
                reason=kind.error,
                dlq_reason=held[lease.job_id]["dlq_reason"] if lease.job_id in held else None,
                queue=row["queue"],
                kind=row["kind"],
            )
            for (lease, t), row in zip(items, candidates, strict=True)
            if (lease.job_id, lease.lease) in applied
        ]

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        """Retry (or fail) running attempts whose heartbeat is older than ``staleness``."""
        cutoff = self._clock.now() - staleness
        return await self._rescue("stale_heartbeats", {"cutoff": cutoff}, Rescue.HEARTBEAT_STALE)

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        """Retry (or fail) running attempts whose deadline has passed."""
        return await self._rescue("expired_deadlines", {}, Rescue.DEADLINE_EXCEEDED)

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        """Retry (or fail) waiting attempts whose callback timed out; the id is cleared."""
        return await self._rescue("expired_callbacks", {}, Rescue.CALLBACK_TIMEOUT)

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        """Delete at most ``batch_size`` expired terminal jobs, oldest first."""
        if batch_size <= 0:
            return 0
        now = self._clock.now()
        floor = RetentionFloor(completed=completed, failed=failed)
        params = {
            "completed_cutoff": floor.cutoff(JobState.Completed, now),
            "cancelled_cutoff": floor.cutoff(JobState.Cancelled, now),
            "failed_cutoff": floor.cutoff(JobState.Failed, now),
            "limit": batch_size,
        }
        async with self._connection() as conn:
            rows = await self._all(conn, "cleanup_retention", params)
        return len(rows)

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        """Delete at most ``batch_size`` DLQ entries older than ``retention``."""
        if batch_size <= 0:
            return 0
        params = {"cutoff": self._clock.now() - retention, "limit": batch_size}
        async with self._connection() as conn:
            rows = await self._all(conn, "cleanup_dlq", params)
        return len(rows)
