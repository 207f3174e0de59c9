"""Shared machinery of the canonical engine: pool, queries, units of work, failure routing."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Self

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.decode import fetch_decodable
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.migrations import canonical_schema_version, require_schema
from awa.adapters._pg.pool import DictConnection, open_pool
from awa.adapters._pg.sql import load_queries
from awa.adapters.clock import SystemClock
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.job import error_entry
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import UnitOfWork

_PACKAGE = "awa.adapters.postgres_canonical"
_QUERY_FILES = ("worker.sql", "maintenance.sql", "admin.sql", "dlq.sql", "batch.sql")

AnyConnection = psycopg.AsyncConnection[Any]


@functools.cache
def _queries() -> dict[str, bytes]:
    merged: dict[str, bytes] = {}
    for filename in _QUERY_FILES:
        for name, text in load_queries(_PACKAGE, filename).items():
            if name in merged:
                raise RuntimeError(f"query {name!r} is defined twice")
            merged[name] = text.encode()
    return merged


def query(name: str) -> bytes:
    """The named statement from this adapter's ``.sql`` files (loaded once)."""
    return _queries()[name]


class CanonicalUnitOfWork:
    """A transaction on one connection. Enqueues through it commit or roll back with it."""

    def __init__(self, conn: AnyConnection, owner: object) -> None:
        self.conn = conn
        self.owner = owner
        self.open = True


class EngineBase:
    """Pool, clock and backoff plus the helpers every canonical operation uses."""

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        owns_pool: bool = False,
    ) -> None:
        self._pool = pool
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backoff = backoff if backoff is not None else Backoff()
        self._owns_pool = owns_pool

    @classmethod
    async def open(
        cls,
        database_url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        max_connections: int = 10,
    ) -> Self:
        """Open a pool on ``database_url`` after checking the schema is migrated.

        Raises ``SchemaNotMigrated`` when the schema is missing, older than this engine
        needs, or newer than this package knows.
        """
        pool = await open_pool(database_url, max_connections=max_connections)
        try:
            async with translated_errors(), pool.connection() as conn:
                await require_schema(conn, minimum=canonical_schema_version())
        except BaseException:
            await pool.close()
            raise
        return cls(pool, clock=clock, backoff=backoff, owns_pool=True)

    #: Alias of :meth:`open`.
    connect = open

    def _conninfo(self) -> str:
        """Connection string of the pool's database, for dedicated connections."""
        conninfo = self._pool.conninfo
        if not isinstance(conninfo, str):
            raise DatabaseError("the pool's connection string is computed; pass a URL instead")
        return conninfo

    @property
    def pool(self) -> AsyncConnectionPool[DictConnection]:
        return self._pool

    # ---------------------------------------------------------------- units of work
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[CanonicalUnitOfWork]:
        """A unit of work on one pooled connection: commit on exit, roll back on error."""
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            uow = CanonicalUnitOfWork(conn, self)
            try:
                yield uow
            finally:
                uow.open = False

    def unit_of_work_for(self, conn: AnyConnection) -> CanonicalUnitOfWork:
        """Wrap a caller's connection that is already inside a transaction."""
        return CanonicalUnitOfWork(conn, self)

    def _own_uow(self, uow: UnitOfWork) -> CanonicalUnitOfWork:
        if not isinstance(uow, CanonicalUnitOfWork):
            raise DatabaseError("the unit of work does not belong to a canonical engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow

    # ---------------------------------------------------------------- connections
    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[DictConnection]:
        """A pooled autocommit connection; driver errors leave as domain errors."""
        async with translated_errors(), self._pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[DictConnection]:
        """A pooled connection inside a transaction."""
        async with self._connection() as conn, conn.transaction():
            yield conn

    @staticmethod
    @asynccontextmanager
    async def _atomic(conn: AnyConnection) -> AsyncIterator[None]:
        """Run the block all-or-nothing without ending a transaction the caller owns.

        Inside an open transaction this is a savepoint. A caller's non-autocommit
        connection with no statement run yet is also "in a transaction" for the caller,
        but ``conn.transaction()`` would BEGIN and COMMIT one of its own there, so an
        explicit savepoint (which opens the implicit transaction) is used instead.
        """
        status = conn.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise DatabaseError("the transaction is aborted; roll it back first")
        if status == TransactionStatus.INTRANS or conn.autocommit:
            async with conn.transaction():
                yield
            return
        await conn.execute("SAVEPOINT awa_atomic")
        try:
            yield
        except BaseException:
            await conn.execute("ROLLBACK TO SAVEPOINT awa_atomic")
            await conn.execute("RELEASE SAVEPOINT awa_atomic")
            raise
        await conn.execute("RELEASE SAVEPOINT awa_atomic")

    @staticmethod
    async def _all(conn: AnyConnection, name: str, params: Mapping[str, Any]) -> list[DictRow]:
        # An explicit dict-row cursor, because callers' connections may use any row factory.
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query(name), params)
            return await fetch_decodable(cur) if cur.description is not None else []

    @classmethod
    async def _one(
        cls, conn: AnyConnection, name: str, params: Mapping[str, Any]
    ) -> DictRow | None:
        rows = await cls._all(conn, name, params)
        return rows[0] if rows else None

    async def _conflict(self, conn: AnyConnection, keys: Iterable[bytes | None]) -> UniqueConflict:
        """A ``UniqueConflict`` naming the holder of the first clashing key.

        ``conn`` must be usable again (the failed statement ran under a rolled-back
        savepoint), so no second pooled connection is needed.
        """
        wanted = [key for key in keys if key is not None]
        holders: dict[bytes, int] = {}
        if wanted:
            rows = await self._all(conn, "unique_holders", {"keys": wanted})
            holders = {bytes(row["unique_key"]): row["job_id"] for row in rows}
        for key in wanted:
            if key in holders:
                return UniqueConflict(
                    f"unique key already held by job {holders[key]}", job_id=holders[key]
                )
        return UniqueConflict("a live job already holds this unique key")

    # ---------------------------------------------------------------- attempt outcomes
    async def _fail_or_dlq(
        self,
        conn: AnyConnection,
        row: Mapping[str, Any],
        *,
        entry: dict[str, Any],
        now: datetime,
        dlq_reason: str,
        clear_callback: bool = False,
    ) -> DictRow | None:
        """Finalize a locked attempt as ``failed``; DLQ-enabled queues hold it instead.

        Returns the DLQ row when the job moved there, else ``None``.
        """
        params = {
            "id": row["id"],
            "error": Jsonb(entry),
            "now": now,
            "clear_callback": clear_callback,
        }
        await self._one(conn, "close_as_failed", params)
        if not row["dlq_enabled"]:
            return None
        return await self._one(
            conn, "move_to_dlq", {"id": row["id"], "reason": dlq_reason, "now": now}
        )

    async def _retry_or_fail(
        self,
        conn: AnyConnection,
        row: Mapping[str, Any],
        *,
        error: str,
        delay: timedelta | None,
        now: datetime,
        dlq_reason: str = "max_attempts_exhausted",
        clear_callback: bool = False,
    ) -> tuple[JobState, str | None]:
        """Close a locked attempt as a retryable failure, or fail it when attempts are
        spent; returns the new state and, when the job moved into the DLQ, its reason."""
        entry = error_entry(error, attempt=row["attempt"], at=now)
        if row["attempt"] >= row["max_attempts"]:
            held = await self._fail_or_dlq(
                conn,
                row,
                entry=entry,
                now=now,
                dlq_reason=dlq_reason,
                clear_callback=clear_callback,
            )
            return JobState.Failed, (None if held is None else dlq_reason)
        wait = delay if delay is not None else self._backoff.delay(row["attempt"])
        await self._one(
            conn,
            "close_as_retryable",
            {
                "id": row["id"],
                "run_at": now + wait,
                "error": Jsonb(entry),
                "clear_callback": clear_callback,
            },
        )
        return JobState.Retryable, None

    async def close(self) -> None:
        """Close the pool if this engine opened it."""
        if self._owns_pool:
            await self._pool.close()
