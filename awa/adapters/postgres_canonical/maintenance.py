"""Maintenance operations of the canonical engine: promotion, rescue and cleanup."""

from __future__ import annotations

from datetime import timedelta

from psycopg.rows import DictRow

from awa.adapters.postgres_canonical.base import EngineBase
from awa.domain.job import RunLease
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

    async def _rescue(
        self,
        name: str,
        params: dict[str, object],
        reason: str,
        *,
        dlq_reason: str = "max_attempts_exhausted",
        clear_callback: bool = False,
    ) -> list[Rescued]:
        now = self._clock.now()
        rescued: list[Rescued] = []
        async with self._transaction() as conn:
            # Candidates are locked (skipping rows a finalizer holds) and ordered by id.
            candidates: list[DictRow] = await self._all(conn, name, {"now": now, **params})
            for row in candidates:
                new_state, dlq = await self._retry_or_fail(
                    conn,
                    row,
                    error=reason,
                    delay=None,
                    now=now,
                    dlq_reason=dlq_reason,
                    clear_callback=clear_callback,
                )
                lease = RunLease(row["id"], row["run_lease"])
                rescued.append(
                    Rescued(
                        lease=lease,
                        new_state=new_state,
                        reason=reason,
                        dlq_reason=dlq,
                        queue=row["queue"],
                        kind=row["kind"],
                    )
                )
        return rescued

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        """Retry (or fail) running attempts whose heartbeat is older than ``staleness``."""
        cutoff = self._clock.now() - staleness
        return await self._rescue("stale_heartbeats", {"cutoff": cutoff}, "heartbeat stale")

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        """Retry (or fail) running attempts whose deadline has passed."""
        return await self._rescue("expired_deadlines", {}, "deadline exceeded")

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        """Retry (or fail) waiting attempts whose callback timed out; the id is cleared."""
        return await self._rescue(
            "expired_callbacks",
            {},
            "callback timed out",
            dlq_reason="callback_timeout",
            clear_callback=True,
        )

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        """Delete at most ``batch_size`` expired terminal jobs, oldest first."""
        if batch_size <= 0:
            return 0
        now = self._clock.now()
        params = {
            "completed_cutoff": now - completed,
            "failed_cutoff": now - failed,
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
