"""The :class:`~awa.ports.results.ResultStore` port on ``awa.job_results``, shared by
both Postgres engines (the table lives in schema ``awa`` whatever the engine, apart from
the job rows, so queue storage's reclaim of finished history does not touch it)."""

from __future__ import annotations

from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import WakeupsUnavailable
from awa.domain.results import RESULT_RETENTION, StoredResult, result_channel
from awa.ports.clock import Clock


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "results.sql")[name].encode()


class PgResultStore:
    """:class:`~awa.ports.results.ResultStore` on ``awa.job_results`` (one per backend, on
    its pool). A waiter's subscription is ``LISTEN awa:result:<id>`` on a dedicated
    connection to the pool's database, proved by a test notification;
    behind a transaction-mode pooler there is none and the waiter polls."""

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        clock: Clock,
    ) -> None:
        self._pool = pool
        self._clock = clock
        # Set once a subscription could not be proved (a transaction-mode pooler), so
        # later waiters poll at once instead of paying the probe's timeout each.
        self._no_wakeups = False

    async def store_result(self, job_id: int, json_text: str) -> None:
        now = self._clock.now()
        params = {
            "job_id": job_id,
            "result": json_text,
            "now": now,
            "expires_at": now + RESULT_RETENTION,
        }
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_query("store_result"), params)

    async def get_result(self, job_id: int) -> StoredResult | None:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                _query("get_result"), {"job_id": job_id, "now": self._clock.now()}
            )
            row = await cur.fetchone()
        if row is None:
            return None
        return StoredResult(
            job_id=int(row["job_id"]),
            json_text=str(row["result"]),
            stored_at=row["stored_at"],
            expires_at=row["expires_at"],
        )

    async def announce_finished(self, job_id: int) -> None:
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_query("announce_finished"), {"channel": result_channel(job_id)})

    async def subscribe_finished(self, job_id: int) -> PostgresSubscription | None:
        if self._no_wakeups:
            return None
        conninfo = self._pool.conninfo
        if not isinstance(conninfo, str):  # a pool built on a conninfo callable: poll
            return None
        notifier = PostgresNotifier(conninfo)
        try:
            return await notifier.subscribe([result_channel(job_id)])
        except WakeupsUnavailable:
            self._no_wakeups = True
            return None

    async def prune_results(self, *, before: datetime) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("prune_results"), {"before": before})
            return cur.rowcount
