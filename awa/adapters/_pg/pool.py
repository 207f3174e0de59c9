"""Connection pools and dedicated connections, configured the same way everywhere."""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.conninfo import normalize
from awa.adapters._pg.errors import map_error

DictConnection = psycopg.AsyncConnection[DictRow]
DictPool = AsyncConnectionPool[DictConnection]

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


@attrs.frozen
class PoolOptions:
    """Sizing and recycling of a connection pool beyond its maximum size.

    ``min_connections`` are kept open; a connection idle for ``max_idle`` seconds (above
    the minimum) is closed, one older than ``max_lifetime`` seconds is replaced, and
    waiting for a free connection gives up after ``acquire_timeout`` seconds."""

    min_connections: int = 1
    max_idle: float = 600.0
    max_lifetime: float = 3600.0
    acquire_timeout: float = 30.0


async def open_pool(
    url: str,
    *,
    max_connections: int = 10,
    min_connections: int = 1,
    timeout: float = 30.0,
    options: PoolOptions | None = None,
) -> AsyncConnectionPool[DictConnection]:
    """Open an async pool of autocommit, dict-row, UTC connections and wait until ready.

    ``options``, when given, overrides ``min_connections`` and ``timeout``."""
    if options is None:
        options = PoolOptions(min_connections=min_connections, acquire_timeout=timeout)
    timeout = options.acquire_timeout
    pool: AsyncConnectionPool[DictConnection] = AsyncConnectionPool(
        normalize(url),
        min_size=min(options.min_connections, max_connections),
        max_size=max_connections,
        kwargs=connect_kwargs(),
        connection_class=psycopg.AsyncConnection[DictRow],
        open=False,
        timeout=timeout,
        max_idle=options.max_idle,
        max_lifetime=options.max_lifetime,
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        raise map_error(exc) from exc
    return pool
