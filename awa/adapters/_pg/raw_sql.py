"""The caller's own SQL on one borrowed connection, for client transactions.

Statements use PostgreSQL's ``$1, $2, ...`` placeholders (sent as written, bound
server-side); a mapping parameter is sent as ``jsonb``. A database error becomes
:class:`~awa.domain.errors.DatabaseError` carrying the server's message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb

from awa.adapters._pg.pool import DictConnection
from awa.domain.errors import DatabaseError

_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"
_ROLLBACK = b"ROLLBACK"


def database_error(exc: BaseException) -> DatabaseError:
    """The error a client transaction raises for a failed statement."""
    return DatabaseError(f"error returned from database: {exc}")


def _param(value: Any) -> Any:
    if isinstance(value, Mapping):
        return Jsonb(dict(value))
    return value


async def begin(conn: DictConnection) -> None:
    """Open a transaction on ``conn`` (an autocommit connection)."""
    try:
        await conn.execute(_BEGIN)
    except psycopg.Error as exc:
        raise database_error(exc) from exc


async def finish(conn: DictConnection, *, commit: bool) -> bool:
    """Commit (or roll back) the transaction open on ``conn``; returns whether a commit
    kept the transaction's work (a COMMIT of a transaction that a failed statement
    aborted rolls it back without an error)."""
    kept = commit and conn.info.transaction_status is not TransactionStatus.INERROR
    try:
        await conn.execute(_COMMIT if commit else _ROLLBACK)
    except psycopg.Error as exc:
        raise database_error(exc) from exc
    return kept


async def _run(
    conn: DictConnection, query: str, args: Sequence[Any]
) -> psycopg.AsyncRawCursor[DictRow]:
    cursor = psycopg.AsyncRawCursor(conn, row_factory=dict_row)
    try:
        await cursor.execute(query, [_param(a) for a in args] if args else None)
    except psycopg.Error as exc:
        raise database_error(exc) from exc
    return cursor


async def execute(conn: DictConnection, query: str, args: Sequence[Any]) -> int:
    """Run a statement; the number of rows it affected."""
    cursor = await _run(conn, query, args)
    return max(cursor.rowcount, 0)


async def fetch_first(
    conn: DictConnection, query: str, args: Sequence[Any]
) -> dict[str, Any] | None:
    """The first row of ``query``, or ``None``."""
    cursor = await _run(conn, query, args)
    row = await cursor.fetchone()
    return None if row is None else dict(row)


async def fetch_all(conn: DictConnection, query: str, args: Sequence[Any]) -> list[dict[str, Any]]:
    """Every row of ``query``."""
    cursor = await _run(conn, query, args)
    return [dict(r) for r in await cursor.fetchall()]
