"""Connection pools and dedicated connections, configured the same way everywhere."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs
import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import MaintenanceTask, StopWorker

from awa.adapters._pg.conninfo import normalize
from awa.adapters._pg.errors import map_error

DictConnection = psycopg.AsyncConnection[DictRow]

log = logging.getLogger("awa.pool")


class _Pool(AsyncConnectionPool[DictConnection]):
    """psycopg's async pool with workers that end when they are cancelled.

    psycopg_pool treats a ``CancelledError`` raised inside a maintenance task (a
    connection attempt, say) as that task failing, and its worker goes back to its queue.
    When the event loop shuts down (``asyncio.run`` cancels every task once and waits for
    them all), a worker cancelled in the middle of a connection attempt would then wait
    on its queue for ever and the program would never exit. This worker ends once its
    task has been asked to cancel, whoever swallowed the ``CancelledError``."""

    @classmethod
    async def worker(cls, q: Any) -> None:
        current = asyncio.current_task()
        while True:
            task: MaintenanceTask = await q.get()
            if isinstance(task, StopWorker):
                return
            try:
                await task.run()
            except Exception as exc:
                log.debug("pool maintenance task %s failed: %r", task, exc)
            if current is not None and current.cancelling():
                raise asyncio.CancelledError


DictPool = AsyncConnectionPool[DictConnection]


class _CancellationNoise(logging.Filter):
    """Demotes psycopg's warnings about a connection whose task is being cancelled to
    DEBUG.

    A query cut off by cancellation makes psycopg warn ("query cancellation interrupted",
    "discarding closed connection", "error connecting in ..."); when the event loop shuts
    down (``asyncio.run`` ending on an error) every task is cancelled at once and those
    warnings would print before the program's own traceback, for connections that were
    meant to go away. Records logged from a task that is not being cancelled keep their
    level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _cancelling():
            record.levelno = logging.DEBUG
            record.levelname = logging.getLevelName(logging.DEBUG)
        return True


def _cancelling() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        return False
    return task is not None and task.cancelling() > 0


_NOISE_FILTER = _CancellationNoise()


def _quiet_cancellation_noise() -> None:
    # Loggers keep their filters in a list; adding the same object twice is a no-op.
    for name in ("psycopg", "psycopg.pool"):
        logging.getLogger(name).addFilter(_NOISE_FILTER)


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
    _quiet_cancellation_noise()
    pool: AsyncConnectionPool[DictConnection] = _Pool(
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
