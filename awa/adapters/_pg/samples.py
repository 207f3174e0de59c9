"""The :class:`~awa.ports.samples.QueueSampleStore` port on ``awa.queue_samples``, shared
by both Postgres engines (the table lives in schema ``awa`` whatever the engine)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.admin_views import QueueSample
from awa.domain.states import JobState

#: Table columns by the state they count.
_COLUMNS = {
    JobState.Available: "available",
    JobState.Scheduled: "scheduled",
    JobState.Retryable: "retryable",
    JobState.Running: "running",
    JobState.WaitingExternal: "waiting_external",
}


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "samples.sql")[name].encode()


def _sample(row: dict[str, Any]) -> QueueSample:
    return QueueSample(
        sampled_at=row["sampled_at"],
        queue=row["queue"],
        counts={state: int(row[column]) for state, column in _COLUMNS.items()},
        lag_seconds=float(row["lag_seconds"]),
    )


class PgQueueSampleStore:
    """:class:`~awa.ports.samples.QueueSampleStore` on ``awa.queue_samples`` (one per
    backend, on its pool)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection]) -> None:
        self._pool = pool

    async def record_queue_samples(self, samples: Sequence[QueueSample]) -> None:
        if not samples:
            return
        params: dict[str, list[Any]] = {
            "at": [s.sampled_at for s in samples],
            "queues": [s.queue for s in samples],
            "lag": [s.lag_seconds for s in samples],
        }
        for state, column in _COLUMNS.items():
            key = "waiting" if column == "waiting_external" else column
            params[key] = [s.count(state) for s in samples]
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_query("record_queue_samples"), params)

    async def queue_samples(self, *, since: datetime) -> list[QueueSample]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("queue_samples"), {"since": since})
            rows = await cur.fetchall()
        return [_sample(row) for row in rows]

    async def prune_queue_samples(self, *, before: datetime) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("prune_queue_samples"), {"before": before})
            return cur.rowcount
