"""The queue-storage engine: the default :class:`~awa.ports.StorageEngine` (ADR 0006)."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.cron import PgCronOps
from awa.adapters._pg.descriptors import PgDescriptorOps
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.leader import PostgresLeaderLock
from awa.adapters._pg.migrations import migrate
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters._pg.overrides import PgOverrideOps
from awa.adapters._pg.pool import DictConnection, connect, open_pool
from awa.adapters._pg.sql import load_queries
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage._base import settled
from awa.adapters.postgres_queue_storage.batch import BatchOps
from awa.adapters.postgres_queue_storage.core import CoreOps
from awa.adapters.postgres_queue_storage.ring import RingOps
from awa.adapters.postgres_queue_storage.statements import PACKAGE
from awa.domain.policies import Backoff
from awa.ports.clock import Clock

DEFAULT_SCHEMA = "awa"


async def install_queue_storage(
    url: str,
    schema: str = DEFAULT_SCHEMA,
    *,
    queue_slot_count: int = 16,
    lease_slot_count: int = 8,
    reset: bool = False,
) -> None:
    """Install (or, with ``reset``, rebuild) the engine's tables in ``schema``.

    Migrates the database first; schema ``awa`` is installed by the migration itself and
    refuses ``reset``.
    """
    await migrate(url)
    conn = await connect(url)
    try:
        async with translated_errors():
            await conn.execute(
                load_queries(PACKAGE, "admin.sql")["install"].encode(),
                {
                    "schema": schema,
                    "queue_slots": queue_slot_count,
                    "lease_slots": lease_slot_count,
                    "reset": reset,
                },
            )
    finally:
        await conn.close()


class QueueStorageEngine(CoreOps, BatchOps, RingOps, PgCronOps, PgOverrideOps, PgDescriptorOps):
    """Append-first Postgres storage: ready rows, receipts and closures in a ring of list
    partitions reclaimed by ``TRUNCATE`` (:meth:`rotate_queue_ring`, :meth:`prune_oldest`).

    Build it with :meth:`open`; it is also the notifier for its own wake-ups.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        url: str,
        *,
        clock: Clock,
        backoff: Backoff,
        schema: str,
    ) -> None:
        super().__init__(pool, clock=clock, backoff=backoff, schema=schema)
        self._url = url

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        schema: str = DEFAULT_SCHEMA,
        max_connections: int = 10,
    ) -> QueueStorageEngine:
        """Migrate, make sure the engine is installed in ``schema`` and open a pool."""
        await install_queue_storage(url, schema)
        pool = await open_pool(url, max_connections=max_connections)
        return cls(
            pool,
            url,
            clock=clock if clock is not None else SystemClock(),
            backoff=backoff if backoff is not None else Backoff(),
            schema=schema,
        )

    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """Listen for ``awa:<queue>`` / ``awa:cancel`` on a dedicated connection."""
        return await PostgresNotifier(self._url).subscribe(channels)

    def leader_lock(self) -> PostgresLeaderLock:
        """A new candidate for the cluster's maintenance leadership."""
        return PostgresLeaderLock(self._url)

    async def close(self) -> None:
        if not self._closed:
            await self._retire()
            await self._pool.close()

    async def _retire(self) -> None:
        """Let the work in flight finish (inserts waiting for their batch, wake-ups),
        refuse new work and close the kept connections. The pool is left to its owner:
        :meth:`close`, or the routing engine that shares it."""
        await settled(self._batch_task)
        await self._drain_wakes()
        self._closed = True
        await self._close_kept()
