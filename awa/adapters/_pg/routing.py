"""The Postgres store under the routing engine: its transactions and its one-statement
routed insert (``awa.insert_job_compat``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.piped import piped_transaction
from awa.adapters._pg.pool import DictConnection
from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import JobState

AnyConnection = psycopg.AsyncConnection[Any]

_INSERT_ONE = (
    b"SELECT j.id, j.run_at, j.created_at FROM awa.insert_job_compat("
    b"%(kind)s, %(queue)s, %(args)s, 'available'::awa.job_state, %(priority)s::smallint, "
    b"%(max_attempts)s::smallint, NULL, %(metadata)s, %(tags)s::text[], NULL, NULL, "
    b"%(ordering_key)s::bytea) j"
)


class PgTransactions:
    """:class:`~awa.ports.transactions.SharedTransactions` on a pool: a transaction is
    one pooled connection inside ``BEGIN`` .. ``COMMIT``; a savepoint is a nested one."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection]) -> None:
        self._pool = pool

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AnyConnection]:
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def savepoint(self, conn: AnyConnection) -> AsyncIterator[None]:
        async with translated_errors(), conn.transaction():
            yield


class PgRoutedInsert:
    """:class:`~awa.ports.producers.RoutedInsert`: ``awa.insert_job_compat`` reads the
    route under the producers' lock and appends to that engine in the same statement, and
    its transaction is pipelined with it (``BEGIN``, the call, ``COMMIT``): one round trip.
    Timestamps come from the database clock."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection]) -> None:
        self._pool = pool

    async def insert_routed(self, spec: JobSpec) -> JobRecord:
        params = {
            "kind": spec.kind,
            "queue": spec.queue,
            "args": Jsonb(spec.args),
            "priority": spec.priority,
            "max_attempts": spec.max_attempts,
            "metadata": Jsonb(dict(spec.metadata)),
            "tags": list(spec.tags),
            "ordering_key": spec.ordering_key,
        }
        async with translated_errors(), self._pool.connection() as conn:
            async with piped_transaction(conn):
                cur = await conn.execute(_INSERT_ONE, params)
            row = await cur.fetchone()
        assert row is not None
        return JobRecord(
            id=int(row["id"]),
            kind=spec.kind,
            queue=spec.queue,
            args=spec.args,
            state=JobState.Available,
            priority=spec.priority,
            attempt=0,
            max_attempts=spec.max_attempts,
            run_at=row["run_at"],
            created_at=row["created_at"],
            metadata=dict(spec.metadata),
            tags=tuple(spec.tags),
            unique_key=None,
            unique_states=spec.effective_unique_states,
        )
