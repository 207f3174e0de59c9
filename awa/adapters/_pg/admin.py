""":class:`~awa.ports.admin.SchemaAdmin` on Postgres: the schema's version, the storage
transition and the runtime registry, as operator commands read and drive them.

One adapter serves both Postgres engines (they share the schema). It runs either on a
dedicated connection (:func:`connect_schema_admin`, what the CLI opens per command) or on
a client's pool (:func:`pool_schema_admin`). The statements are in ``admin.sql``; the
transition steps are the SQL functions :mod:`awa.adapters._pg.transition` calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import attrs
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg import migrations as pg_migrations
from awa.adapters._pg import schema_objects as pg_schema_objects
from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.conninfo import normalize
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.leader import read_lease
from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters._pg.sql import load_queries
from awa.domain.transition import (
    RuntimeView,
    StorageCapability,
    TransitionStatus,
    status_report,
)
from awa.ports.admin import RuntimeCounts
from awa.ports.clock import Clock

ConnectionSource = Callable[[], AbstractAsyncContextManager[DictConnection]]

#: What each optional read needs; an older schema without it reads as ``None``.
TRANSITION_TABLE = "awa.storage_transition_state"
STATUS_FUNCTION = "awa.storage_status()"
BACKLOG_FUNCTION = "awa.canonical_live_backlog()"
LEADER_LEASES_TABLE = "awa.leader_leases"
RING_MAINTENANCE_TABLE = "awa.ring_maintenance"
RUNTIMES_TABLE = "awa.runtime_instances"


def query(name: str) -> bytes:
    """The statement ``name`` of ``admin.sql``."""
    return load_queries("awa.adapters._pg", "admin.sql")[name].encode()


async def _rows(
    conn: DictConnection, name: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    cur = await conn.execute(query(name), params or {})
    return [dict(row) for row in await cur.fetchall()]


async def _first(
    conn: DictConnection, name: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    rows = await _rows(conn, name, params)
    return rows[0] if rows else None


async def _present(conn: DictConnection, name: str, params: Mapping[str, Any]) -> bool:
    row = await _first(conn, name, params)
    return bool(row and row["present"])


async def ping(conn: DictConnection) -> None:
    """One round trip; raises if the connection does not answer."""
    await _rows(conn, "ping")


class PgSchemaAdmin:
    """:class:`~awa.ports.admin.SchemaAdmin` over connections from ``connection``; it
    waits (:meth:`finalize_when_drained`) on ``clock``."""

    def __init__(
        self,
        connection: ConnectionSource,
        *,
        clock: Clock,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._on_close = on_close

    async def close(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            await on_close()

    # ------------------------------------------------------------------ reads
    async def _relation(self, conn: DictConnection, name: str) -> bool:
        return await _present(conn, "relation_exists", {"name": name})

    async def _function(self, conn: DictConnection, signature: str) -> bool:
        return await _present(conn, "function_exists", {"signature": signature})

    async def schema_version(self) -> int:
        async with translated_errors(), self._connection() as conn:
            return await pg_migrations.applied_version(conn)

    async def pending_schema_files(self) -> list[tuple[str, str]]:
        async with translated_errors(), self._connection() as conn:
            pending = await pg_schema_objects.pending_schema_objects(conn)
        return [(obj.path, obj.sql) for obj in pending]

    async def transition_state(self) -> dict[str, Any] | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._relation(conn, TRANSITION_TABLE):
                return None
            row = await _first(conn, "transition_state")
        if row is None:
            return None
        return {k: v for k, v in row.items() if k != "singleton"}

    async def has_transition_functions(self) -> bool:
        async with translated_errors(), self._connection() as conn:
            return await self._function(conn, STATUS_FUNCTION)

    async def storage_status(self) -> dict[str, Any] | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._function(conn, STATUS_FUNCTION):
                return None
            row = await _first(conn, "storage_status")
            if row is None:
                return None
            status = TransitionStatus.from_row(row)
            backlog = 0
            if await self._function(conn, BACKLOG_FUNCTION):
                backlog = await pg_transition.canonical_live_backlog(conn)
            runtimes: list[RuntimeView] = []
            if await self._relation(conn, RUNTIMES_TABLE):
                known = {c.value: c for c in StorageCapability}
                runtimes = [
                    RuntimeView(known[r["storage_capability"]], bool(r["live"]))
                    for r in await _rows(conn, "runtime_capabilities")
                    if r["storage_capability"] in known
                ]
            installed = await pg_transition.queue_storage_installed(conn, status.schema)
        return status_report(
            status, canonical_backlog=backlog, schema_installed=installed, runtimes=runtimes
        )

    async def transition_backlog(self) -> dict[str, Any] | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._function(conn, BACKLOG_FUNCTION):
                return None
            return await _first(conn, "transition_backlog")

    async def rebuild_terminal_counters(self) -> tuple[str, int] | None:
        async with translated_errors(), self._connection() as conn:
            row = await _first(conn, "rebuild_counters")
        return None if row is None else (str(row["schema_name"]), int(row["written"]))

    async def ring_maintenance(self) -> list[dict[str, Any]] | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._relation(conn, RING_MAINTENANCE_TABLE):
                return None
            return await _rows(conn, "ring_maintenance")

    async def runtime_counts(self) -> RuntimeCounts | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._relation(conn, RUNTIMES_TABLE):
                return None
            row = await _first(conn, "runtime_counts") or {}
        return RuntimeCounts(
            **{f.name: int(row.get(f.name) or 0) for f in attrs.fields(RuntimeCounts)}
        )

    async def leader_lease(self) -> dict[str, Any] | None:
        async with translated_errors(), self._connection() as conn:
            if not await self._relation(conn, LEADER_LEASES_TABLE):
                return None
            lease = await read_lease(conn)
        return None if lease is None else attrs.asdict(lease)

    async def served_queues(self) -> frozenset[str]:
        async with translated_errors(), self._connection() as conn:
            rows = await _rows(conn, "served_queues")
        return frozenset(str(r["queue"]) for r in rows)

    # ------------------------------------------------------------------ transition steps
    async def prepare(self, engine: str, details: Mapping[str, Any]) -> TransitionStatus:
        async with self._connection() as conn:
            return await pg_transition.prepare(conn, engine, details)

    async def enter_mixed_transition(self, *, quiesced: bool = False) -> TransitionStatus:
        async with self._connection() as conn:
            return await pg_transition.enter_mixed_transition(conn, quiesced=quiesced)

    async def finalize(self) -> TransitionStatus:
        async with self._connection() as conn:
            return await pg_transition.finalize(conn)

    async def check_finalize(self) -> TransitionStatus:
        async with self._connection() as conn, conn.transaction(force_rollback=True):
            return await pg_transition.finalize(conn)

    async def finalize_when_drained(self, timeout: float) -> TransitionStatus:
        async with self._connection() as conn:
            return await pg_transition.finalize_when_drained(
                conn, timeout=timeout, clock=self._clock
            )

    async def abort(self) -> TransitionStatus:
        async with self._connection() as conn:
            return await pg_transition.abort(conn)

    async def install_queue_storage_schema(
        self, schema: str, *, queue_slot_count: int, lease_slot_count: int, reset: bool
    ) -> bool:
        async with self._connection() as conn:
            await pg_transition.install_schema(
                conn,
                schema,
                queue_slot_count=queue_slot_count,
                lease_slot_count=lease_slot_count,
                reset=reset,
            )
            return await pg_transition.queue_storage_installed(conn, schema)


async def connect_schema_admin(
    url: str, *, clock: Clock, connect_timeout: int | None = None
) -> PgSchemaAdmin:
    """A schema admin on one dedicated connection to ``url`` (closed by ``close()``),
    waiting on ``clock``; ``connect_timeout`` bounds the connection attempt, in seconds."""
    target = normalize(url)
    if connect_timeout is not None:
        target = make_conninfo(target, connect_timeout=str(connect_timeout))
    conn = await connect(target)
    return PgSchemaAdmin(lambda: nullcontext(conn), clock=clock, on_close=conn.close)


def pool_schema_admin(pool: AsyncConnectionPool[DictConnection], clock: Clock) -> PgSchemaAdmin:
    """A schema admin borrowing a connection from ``pool`` per call, waiting on ``clock``."""
    return PgSchemaAdmin(pool.connection, clock=clock)
