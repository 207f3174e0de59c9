"""Live queue overrides shared by every Postgres engine
(:class:`~awa.ports.overrides.QueueOverrideStore` on ``awa.queue_meta``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.overrides import QueueOverrides, validate_overrides
from awa.ports.clock import Clock


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "overrides.sql")[name].encode()


def _overrides(row: Mapping[str, Any]) -> QueueOverrides:
    return QueueOverrides(
        poll_interval_ms=row["override_poll_interval_ms"],
        claim_batch_size=row["override_claim_batch_size"],
        rate_limit_per_second=row["override_rate_limit_per_second"],
        rate_limit_burst=row["override_rate_limit_burst"],
        deadline_ms=row["override_deadline_ms"],
        max_running_per_key=row["override_max_running_per_key"],
        global_rate_per_second=row["override_global_rate_per_second"],
        global_rate_burst=row["override_global_rate_burst"],
        global_rate_per_key_per_second=row["override_global_rate_per_key_per_second"],
        global_rate_per_key_burst=row["override_global_rate_per_key_burst"],
    )


class PgQueueOverrideStore:
    """:class:`~awa.ports.overrides.QueueOverrideStore` on ``awa.queue_meta`` (one per
    backend, on its pool)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection], clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def _override_rows(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query(name), params)
            return list(await cur.fetchall()) if cur.description is not None else []

    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        rows = await self._override_rows("get_queue_overrides", {"queue": queue})
        if not rows:
            return None
        found = _overrides(rows[0])
        return None if found.is_empty else found

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        validate_overrides(overrides)
        params = {"queue": queue, "now": self._clock.now(), **overrides.as_dict()}
        await self._override_rows("set_queue_overrides", params)

    async def clear_queue_overrides(self, queue: str) -> bool:
        params = {"queue": queue, "now": self._clock.now()}
        return bool(await self._override_rows("clear_queue_overrides", params))

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        rows = await self._override_rows("list_queue_overrides", {})
        return {row["queue"]: _overrides(row) for row in rows}
