"""Running the engine's statements on a connection.

psycopg converts the placeholders of a statement on every execute unless the statement is
short (it caches only statements up to 4 KiB). The engine's hot statements (the
one-statement enqueue, the claim) are longer, and converting them again cost about a
quarter of an insert's client CPU. Their set is fixed, so the cursors the engine runs them
on cache the conversion of any length, bounded by the number of statements. Nothing
outside the engine's own cursors changes: no library setting is touched.
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg
from psycopg import AsyncCursor
from psycopg._queries import PostgresQuery, _query2pg_nocache
from psycopg.rows import DictRow

from awa.adapters._pg.pool import DictConnection

#: Conversions kept: more than the engine's statements (and the claim's EXPLAIN).
_CONVERSIONS_KEPT = 256

_convert = functools.lru_cache(maxsize=_CONVERSIONS_KEPT)(_query2pg_nocache)


class _StatementQuery(PostgresQuery):
    """Placeholder conversion cached for every statement, whatever its length."""

    __slots__ = ()

    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or type(query) is not bytes:
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _convert(
            query, self._tx.encoding
        )
        self.dump(vars)


class _StatementCursor(AsyncCursor[DictRow]):
    __slots__ = ()
    _query_cls = _StatementQuery


async def run(
    conn: DictConnection,
    statement: bytes,
    params: Any = None,
    *,
    prepare: bool | None = None,
) -> AsyncCursor[DictRow]:
    """``conn.execute(statement, params, prepare=prepare)`` on one of the engine's cursors."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    cur = _StatementCursor(conn, row_factory=conn.row_factory)
    return await cur.execute(statement, params, prepare=prepare)
