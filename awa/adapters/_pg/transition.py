"""Postgres side of the storage transition: calls the SQL functions of migration 0200.

Every step runs in the database (``awa.storage_prepare`` and friends) so external
migration tooling and this package share one implementation of the gates; this module
turns their rows into :class:`~awa.domain.transition.TransitionStatus` and their refusals
into :class:`~awa.domain.transition.TransitionRefused`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import map_error, translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.transition import (
    DEFAULT_SCHEMA,
    Gate,
    StorageCapability,
    TransitionObservation,
    TransitionRefused,
    TransitionStatus,
    backlog_matters,
)
from awa.domain.validation import LEASE_SLOT_COUNT, QUEUE_SLOT_COUNT
from awa.ports.clock import Clock

AnyConnection = psycopg.AsyncConnection[Any]

#: SQLSTATE of a refused step (``object_not_in_prerequisite_state``).
REFUSED_SQLSTATE = "55000"

_GATES = {gate.value: gate for gate in Gate}


def refusal_from(exc: psycopg.Error) -> TransitionRefused | None:
    """The refusal carried by a database error, or ``None`` if it is not one.

    The gate travels in the error's HINT field, so no message text is parsed.
    """
    if exc.sqlstate != REFUSED_SQLSTATE:
        return None
    gate = _GATES.get(exc.diag.message_hint or "")
    if gate is None:
        return None
    primary = exc.diag.message_primary or ""
    prefix = f"storage transition refused by gate {gate.value}: "
    return TransitionRefused(gate, primary.removeprefix(prefix))


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        refused = refusal_from(exc)
        if refused is not None:
            raise refused from None
        raise map_error(exc) from exc


async def _rows(conn: AnyConnection, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    async with _translated(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.encode(), params)
        return list(await cur.fetchall())


async def _status_of(
    conn: AnyConnection, sql: str, params: tuple[Any, ...] = ()
) -> TransitionStatus:
    rows = await _rows(conn, sql, params)
    if not rows:
        raise TransitionRefused(Gate.TRANSITION_IN_PROGRESS, "the transition singleton is missing")
    return TransitionStatus.from_row(rows[0])


async def read_status(conn: AnyConnection) -> TransitionStatus:
    """The current transition status (no locks)."""
    return await _status_of(conn, "SELECT * FROM awa.storage_status()")


async def producer_schema(conn: AnyConnection) -> str | None:
    """Where a producer in ``conn``'s open transaction must write new jobs: the
    queue-storage schema, or ``None`` for canonical. Takes the shared producer lock, held
    until that transaction ends, so no transition step passes the insert."""
    rows = await _rows(conn, "SELECT awa.storage_producer_schema() AS schema")
    value = rows[0]["schema"] if rows else None
    return value if isinstance(value, str) else None


async def prepare(
    conn: AnyConnection, engine: str, details: Mapping[str, Any] | None = None
) -> TransitionStatus:
    """``awa.storage_prepare(engine, details)``."""
    return await _status_of(
        conn,
        "SELECT * FROM awa.storage_prepare(%s, %s)",
        (engine, Jsonb(dict(details or {}))),
    )


async def enter_mixed_transition(
    conn: AnyConnection, *, quiesced: bool = False
) -> TransitionStatus:
    """``awa.storage_enter_mixed_transition(p_quiesced)``."""
    return await _status_of(
        conn,
        "SELECT * FROM awa.storage_enter_mixed_transition(p_quiesced => %s)",
        (quiesced,),
    )


async def finalize(conn: AnyConnection) -> TransitionStatus:
    """``awa.storage_finalize()``."""
    return await _status_of(conn, "SELECT * FROM awa.storage_finalize()")


async def abort(conn: AnyConnection) -> TransitionStatus:
    """``awa.storage_abort()``."""
    return await _status_of(conn, "SELECT * FROM awa.storage_abort()")


async def auto_finalize_if_fresh(conn: AnyConnection, schema: str = "awa") -> bool:
    """``awa.storage_auto_finalize_if_fresh(schema)``: whether the cluster went active."""
    rows = await _rows(conn, "SELECT awa.storage_auto_finalize_if_fresh(%s) AS done", (schema,))
    return bool(rows and rows[0]["done"])


async def activate(conn: AnyConnection, schema: str = DEFAULT_SCHEMA) -> TransitionStatus:
    """``awa.storage_activate_queue_storage(schema)``: queue storage in ``schema`` becomes
    the active engine now, or :class:`TransitionRefused` names what would be left behind."""
    return await _status_of(conn, "SELECT * FROM awa.storage_activate_queue_storage(%s)", (schema,))


async def canonical_live_backlog(conn: AnyConnection) -> int:
    """``awa.canonical_live_backlog()``: canonical jobs not yet terminal."""
    rows = await _rows(conn, "SELECT awa.canonical_live_backlog() AS n")
    return int(rows[0]["n"]) if rows else 0


async def observe(conn: AnyConnection) -> TransitionObservation:
    """The status, the canonical backlog while a transition is under way, whether the
    target schema is installed and the live runtimes by capability (a few index reads;
    the backlog is a count of canonical jobs not yet terminal, read only when it gates
    a step)."""
    status = await read_status(conn)
    backlog = await canonical_live_backlog(conn) if backlog_matters(status.state) else None
    live: dict[StorageCapability, int] = {}
    known = {c.value: c for c in StorageCapability}
    runtimes = load_queries("awa.adapters._pg", "admin.sql")["runtime_capabilities"]
    for row in await _rows(conn, runtimes):
        capability = known.get(row["storage_capability"])  # None: a newer release's
        if capability is not None and row["live"]:
            live[capability] = live.get(capability, 0) + 1
    return TransitionObservation(
        status=status,
        canonical_backlog=backlog,
        schema_installed=await queue_storage_installed(conn, status.schema),
        live_runtimes=live,
    )


async def queue_storage_installed(conn: AnyConnection, schema: str) -> bool:
    """Whether ``schema`` holds the queue-storage tables."""
    rows = await _rows(conn, "SELECT awa.queue_storage_installed(%s) AS ok", (schema,))
    return bool(rows and rows[0]["ok"])


async def move_canonical_backlog(conn: AnyConnection, *, limit: int) -> int:
    """Move up to ``limit`` waiting canonical jobs into queue storage (same ids); does
    nothing unless producers already route to queue storage."""
    rows = await _rows(conn, "SELECT awa.storage_move_canonical_backlog(%s) AS n", (limit,))
    return int(rows[0]["n"]) if rows else 0


async def install_schema(
    conn: AnyConnection,
    schema: str,
    *,
    queue_slot_count: int = QUEUE_SLOT_COUNT,
    lease_slot_count: int = LEASE_SLOT_COUNT,
    reset: bool = False,
) -> None:
    """Build (or with ``reset`` rebuild) the queue-storage tables in ``schema``."""
    await _rows(
        conn,
        "SELECT awa.install_queue_storage(%s, %s, %s, %s) AS done",
        (schema, queue_slot_count, lease_slot_count, reset),
    )


async def finalize_when_drained(
    conn: AnyConnection, *, timeout: float, clock: Clock, poll_interval: float = 0.5
) -> TransitionStatus:
    """Call ``finalize`` on ``conn`` until the canonical backlog gate passes or
    ``timeout`` seconds of ``clock`` elapse; any other refusal (or the backlog one at the
    deadline) is raised."""
    deadline = clock.monotonic() + timeout
    while True:
        try:
            return await finalize(conn)
        except TransitionRefused as refused:
            if refused.gate is not Gate.CANONICAL_BACKLOG_DRAINED:
                raise
            if clock.monotonic() >= deadline:
                raise
        await clock.sleep(max(0.0, min(poll_interval, deadline - clock.monotonic())))


class PgTransitionState:
    """:class:`~awa.ports.transition.TransitionStore` of a Postgres database, over a pool
    (the producer route is read on the producer's own connection)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection]) -> None:
        self._pool = pool

    async def read_status(self) -> TransitionStatus:
        async with translated_errors(), self._pool.connection() as conn:
            return await read_status(conn)

    async def producer_schema(self, conn: AnyConnection) -> str | None:
        async with translated_errors():
            if conn.info.transaction_status == pq.TransactionStatus.IDLE and not conn.autocommit:
                # A caller's connection before its first statement: open its transaction now
                # so the producer lock is held until the caller commits.
                await conn.execute("SELECT 1")
            return await producer_schema(conn)

    async def canonical_job_ids(self, job_ids: Sequence[int]) -> set[int]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM awa.canonical_jobs WHERE id = ANY(%s)", (list(job_ids),)
            )
            return {int(row["id"]) for row in await cur.fetchall()}

    async def queue_storage_installed(self, schema: str) -> bool:
        async with translated_errors(), self._pool.connection() as conn:
            return await queue_storage_installed(conn, schema)

    async def observe_transition(self) -> TransitionObservation:
        async with translated_errors(), self._pool.connection() as conn:
            return await observe(conn)

    async def activate_if_fresh(self, schema: str = DEFAULT_SCHEMA) -> bool:
        async with translated_errors(), self._pool.connection() as conn:
            return await auto_finalize_if_fresh(conn, schema)

    async def move_canonical_backlog(self, *, limit: int) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            return await move_canonical_backlog(conn, limit=limit)
