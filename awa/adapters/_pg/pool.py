"""Connection pools and dedicated connections, configured the same way everywhere.

Every connection is either *direct* (Postgres itself, or a pooler in session mode: the
session is ours until we close it) or *pooled* (a pooler in transaction mode, such as
PgBouncer's ``pool_mode = transaction``: each transaction may run on another server
session). A pooled connection keeps nothing in its session (ADR 0015): no named prepared
statements (``prepare_threshold`` is ``None`` and :func:`is_pooled` tells the engines not
to force one), no session settings, and its timestamps are read back in UTC by the
loaders instead of the session's ``timezone``. Which one a connection is comes from
:func:`declare_pooler`, or by default is detected when it opens (:func:`_behind_pooler`).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import psycopg
from psycopg.adapt import Buffer
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import MaintenanceTask, StopWorker

from awa.adapters._pg.arrays import Int8s, Int8sDumper
from awa.adapters._pg.conninfo import normalize
from awa.adapters._pg.errors import map_error

DictConnection = psycopg.AsyncConnection[DictRow]

log = logging.getLogger("awa.pool")


#: Prepares a new direct connection of a pool for the statements an engine runs on it
#: (:func:`add_warmer`).
Warmer = Callable[[DictConnection], Awaitable[None]]


class _Pool(AsyncConnectionPool[DictConnection]):
    """psycopg's async pool with workers that end when they are cancelled, and the
    warmers of the engines that share it (:func:`add_warmer`).

    psycopg_pool treats a ``CancelledError`` raised inside a maintenance task (a
    connection attempt, say) as that task failing, and its worker goes back to its queue.
    When the event loop shuts down (``asyncio.run`` cancels every task once and waits for
    them all), a worker cancelled in the middle of a connection attempt would then wait
    on its queue for ever and the program would never exit. This worker ends once its
    task has been asked to cancel, whoever swallowed the ``CancelledError``."""

    #: Run on each new direct connection before the pool lends it out.
    warmers: list[Warmer]

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
    meant to go away. A demoted record goes on only where its logger has DEBUG enabled
    (``awa dev`` printed two such lines at every shutdown while psycopg's logger stayed at
    WARNING). Records logged from a task that is not being cancelled keep their level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _cancelling():
            record.levelno = logging.DEBUG
            record.levelname = logging.getLevelName(logging.DEBUG)
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
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


class Pooler(enum.Enum):
    """What a connection string points at, as far as session state is concerned."""

    #: Find out on every new connection (:func:`_behind_pooler`).
    AUTO = "auto"
    #: Postgres itself or a session-mode pooler: session state is safe.
    DIRECT = "direct"
    #: A transaction-mode pooler: nothing may outlive a transaction.
    TRANSACTION = "transaction"


#: ``AWA_POOLER`` / ``pooler=`` values, for messages.
POOLER_CHOICES = tuple(mode.value for mode in Pooler)

# Every direct session reads timestamps back in UTC so snapshots compare equal to clock
# values; a pooled one cannot carry the setting (PgBouncer before 1.20 refuses the
# ``options`` startup parameter), so its loaders convert instead.
_BASE_KWARGS: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
_DIRECT_OPTIONS = "-c timezone=UTC"

_DECLARED: dict[tuple[str, ...], Pooler] = {}
_POOLED: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()


def _target(url: str) -> tuple[str, ...]:
    """The server a connection string names (host, port, database, user), whatever else
    it carries (``connect_timeout``, ``application_name``)."""
    try:
        params = conninfo_to_dict(normalize(url))
    except psycopg.Error:
        return (url,)
    return tuple(str(params.get(k, "")) for k in ("host", "hostaddr", "port", "dbname", "user"))


def declare_pooler(url: str, mode: Pooler | str) -> Pooler:
    """Say what ``url`` points at for every connection opened to it from now on in this
    process (``auto`` detects it per connection, the default). Raises ``ValueError``
    naming the accepted values."""
    try:
        resolved = Pooler(mode)
    except ValueError:
        raise ValueError(
            f"pooler must be one of {', '.join(POOLER_CHOICES)}, got {mode!r}"
        ) from None
    if resolved is Pooler.AUTO:
        _DECLARED.pop(_target(url), None)
    else:
        _DECLARED[_target(url)] = resolved
    return resolved


def declared_pooler(url: str) -> Pooler:
    """What :func:`declare_pooler` said about ``url`` (``AUTO`` when nothing)."""
    return _DECLARED.get(_target(url), Pooler.AUTO)


def is_pooled(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn`` goes through a transaction-mode pooler: run nothing on it that
    outlives a transaction (a named prepared statement, a session ``SET``)."""
    return conn in _POOLED


class _UtcTimestamptzLoader(TimestamptzLoader):
    """``timestamptz`` text values as UTC datetimes, whatever the session's timezone."""

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._timezone = UTC

    def load(self, data: Buffer) -> datetime:
        return super().load(data).astimezone(UTC)


class _UtcTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    """``timestamptz`` binary values as UTC datetimes."""

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._timezone = UTC


def connect_kwargs(url: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``psycopg.AsyncConnection.connect`` used by every adapter
    (the session timezone only where ``url`` is declared direct)."""
    kwargs = dict(_BASE_KWARGS)
    if url is not None and declared_pooler(url) is Pooler.DIRECT:
        kwargs["options"] = _DIRECT_OPTIONS
    return kwargs


#: The pooler probe (:func:`_behind_pooler`); on the backend the connection was told about
#: it also sets the session's time zone, in the same round trip.
_PROBE = (
    "SELECT pg_backend_pid() AS pid, "
    "CASE WHEN pg_backend_pid() = %s THEN set_config('TimeZone', 'UTC', false) END AS tz"
)


async def _behind_pooler(conn: DictConnection) -> bool:
    """Whether ``conn`` reaches its server through a pooler: a pooler answers the
    connection with a cancel key of its own, so the backend the statement runs on is not
    the one the connection was told about. (A session-mode pooler counts too: treating
    it as pooled only costs the prepared statements.) A direct connection's session gets
    the UTC time zone in the same statement, which therefore sets it only where the
    backend is the connection's own: through a pooler the session belongs to others.
    One round trip where the probe and ``SET TIME ZONE`` took two (over a slow link, a
    new connection's set-up is a producer's slowest inserts)."""
    cur = await conn.execute(_PROBE, [conn.info.backend_pid])
    row = await cur.fetchone()
    return row is None or int(row["pid"]) != conn.info.backend_pid


_JSON = json.JSONDecoder()


def _json_loads(data: str | bytes) -> Any:
    """``json.loads`` of a ``json``/``jsonb`` value as the server sends it (UTF-8 text),
    with the empty object every job's ``metadata`` mostly is answered without the parser
    (a new dict each time). Every claimed job carries two such values: decoding them was
    a tenth of a worker's CPU at 1,000 jobs/s."""
    if data == b"{}":
        return {}
    if isinstance(data, bytes):
        data = data.decode("utf-8", "surrogatepass")
    return _JSON.decode(data)


async def configure(conn: DictConnection, url: str) -> None:
    """Make a new connection to ``url`` direct or pooled (see the module docstring)."""
    set_json_loads(_json_loads, conn)
    conn.adapters.register_dumper(Int8s, Int8sDumper)
    mode = declared_pooler(url)
    if mode is Pooler.DIRECT:
        return
    if mode is Pooler.AUTO and not await _behind_pooler(conn):
        return
    conn.prepare_threshold = None
    conn.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", _UtcTimestamptzBinaryLoader)
    _POOLED.add(conn)


def add_warmer(pool: AsyncConnectionPool[DictConnection], warmer: Warmer) -> None:
    """Have ``warmer`` run on every direct connection ``pool`` opens from now on, before
    the pool lends it out: off the callers' path, a new backend loads the catalog and
    plans an engine's hot statement (a producer's first inserts on a new backend took
    6-9 ms each, then 1-2 ms while the server made custom plans, against 0.5 ms after).
    A pool not opened by :func:`open_pool` has no warmers."""
    if isinstance(pool, _Pool):
        pool.warmers.append(warmer)


def remove_warmer(pool: AsyncConnectionPool[DictConnection], warmer: Warmer) -> None:
    """Stop running ``warmer`` on ``pool``'s new connections (its engine retired)."""
    if isinstance(pool, _Pool) and warmer in pool.warmers:
        pool.warmers.remove(warmer)


async def _configure_pooled(conn: DictConnection, url: str, warmers: list[Warmer]) -> None:
    """:func:`configure`, then the pool's warmers on a direct connection. A warmer is best
    effort: one that fails (a schema not installed yet, a route that moved) leaves the
    connection as it was, lent out unwarmed; the failure is logged at DEBUG."""
    await configure(conn, url)
    if is_pooled(conn):
        # Nothing is prepared through a transaction-mode pooler, and the next transaction
        # may run on another server session: nothing to warm.
        return
    for warmer in list(warmers):
        try:
            await warmer(conn)
        except (psycopg.Error, OSError) as exc:
            if conn.closed:
                raise
            log.debug("warming a new connection failed: %r", exc)


async def connect(url: str) -> DictConnection:
    """Open one dedicated autocommit connection (LISTEN, leader lock, migrations)."""
    try:
        conn: DictConnection = await psycopg.AsyncConnection.connect(
            normalize(url), **connect_kwargs(url)
        )
    except (psycopg.Error, OSError) as exc:
        raise map_error(exc) from exc
    try:
        await configure(conn, url)
    except (psycopg.Error, OSError) as exc:
        await conn.close()
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
    warmers: list[Warmer] = []
    pool = _Pool(
        normalize(url),
        min_size=min(options.min_connections, max_connections),
        max_size=max_connections,
        kwargs=connect_kwargs(url),
        connection_class=psycopg.AsyncConnection[DictRow],
        configure=lambda conn: _configure_pooled(conn, url, warmers),
        open=False,
        timeout=timeout,
        max_idle=options.max_idle,
        max_lifetime=options.max_lifetime,
    )
    pool.warmers = warmers
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        raise map_error(exc) from exc
    return pool
