"""Connection pools and dedicated connections, configured the same way everywhere."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.conninfo import normalize
from awa.adapters._pg.errors import map_error

DictConnection = psycopg.AsyncConnection[DictRow]

# Every session reads timestamps back in UTC so snapshots compare equal to clock values.
_CONNECT_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "row_factory": dict_row,
    "options": "-c timezone=UTC",
}


def connect_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``psycopg.AsyncConnection.connect`` used by every adapter."""
    return dict(_CONNECT_KWARGS)


async def connect(url: str) -> DictConnection:
    """Open one dedicated autocommit connection (LISTEN, leader lock, migrations)."""
    try:
        conn: DictConnection = await psycopg.AsyncConnection.connect(
            normalize(url), **_CONNECT_KWARGS
        )
    except (psycopg.Error, OSError) as exc:
        raise map_error(exc) from exc
    return conn


async def open_pool(
    url: str, *, max_connections: int = 10, min_connections: int = 1, timeout: float = 30.0
) -> AsyncConnectionPool[DictConnection]:
    """Open an async pool of autocommit, dict-row, UTC connections and wait until ready."""
    pool: AsyncConnectionPool[DictConnection] = AsyncConnectionPool(
        normalize(url),
        min_size=min(min_connections, max_connections),
        max_size=max_connections,
        kwargs=connect_kwargs(),
        connection_class=psycopg.AsyncConnection[DictRow],
        open=False,
        timeout=timeout,
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        raise map_error(exc) from exc
    return pool
