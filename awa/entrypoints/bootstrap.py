"""Composition root: picks the concrete storage engine and Postgres plumbing for a client.

Everything the public client needs from the outside world is opened here, so switching
the engine is a change to this module (and :mod:`awa.entrypoints.routing`, which builds
the routing engine) only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg import access as pg_access
from awa.adapters._pg import admin as pg_admin
from awa.adapters._pg import conninfo
from awa.adapters._pg import limits as pg_limits
from awa.adapters._pg import migrations as pg_migrations
from awa.adapters._pg import pool as pg_pool
from awa.adapters._pg import schema_objects as pg_schema_objects
from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.access import WriteAccess
from awa.adapters._pg.adopt import AdoptionReport
from awa.adapters._pg.conninfo import scrub_exception
from awa.adapters._pg.errors import map_error, translated_errors
from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters._pg.pool import PoolOptions, open_pool
from awa.adapters._pg.pool import connect as pg_connect
from awa.adapters._pg.runtime_registry import PostgresRuntimeRegistry
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage.connections import MAX_KEPT_CONNECTIONS
from awa.domain.errors import ConnectionLimitTooLow, DatabaseError, WakeupsUnavailable
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import Backoff
from awa.domain.transition import TransitionStatus
from awa.entrypoints.environment import LISTEN_URL_ENV, POOLER_ENV
from awa.ports.admin import SchemaAdmin
from awa.ports.clock import Clock
from awa.ports.control_plane import Backend, ControlPlane
from awa.ports.leader import LeaderCandidates, LeaderLock
from awa.ports.notifier import Notifier
from awa.ports.producers import StripedProducer
from awa.ports.runtime_registry import RuntimeRegistry
from awa.ports.storage import StorageEngine
from awa.ports.transactions import TransactionJoiner
from awa.ports.transition import TransitionFollower

if TYPE_CHECKING:
    from awa.runtime.heartbeat import EngineFactory
    from awa.runtime.maintenance import BackendFactory

Connection = psycopg.AsyncConnection[DictRow]

log = logging.getLogger(__name__)

POOLER_CHOICES = pg_pool.POOLER_CHOICES

ELIGIBILITY_TIMEOUT = 10.0

NO_DATABASE = "this client has no database (the in-memory client): use a Postgres client"


class ClientEngine(
    StripedProducer,
    StorageEngine,
    TransactionJoiner[Connection],
    TransitionFollower,
    Notifier,
    LeaderCandidates,
    Protocol,
):
    """Everything a client asks of its storage engine: the storage port, the producer
    calls with queue stripes and pre-validated specs (``validated=True``: the client built
    them with ``validate_spec``), units of work on a caller's open transaction, the
    transition state it follows, notifications and leader-lock candidates. The
    control-plane stores come beside it (:class:`Wiring`'s ``control``)."""


@attrs.define
class Wiring:
    """The engine, the control plane of its backend, and the connection pool both run on
    that also serves client transactions and raw SQL (``None`` for the in-memory
    client)."""

    url: str
    engine: ClientEngine
    control: ControlPlane
    pool: AsyncConnectionPool[Connection] | None = None
    #: The per-kind policies of the client: every engine opened for it reads them.
    policies: KindPolicies = attrs.field(factory=KindPolicies)

    def database(self) -> AsyncConnectionPool[Connection]:
        """The pool, or ``DatabaseError`` when this client has no database."""
        if self.pool is None:
            raise DatabaseError(NO_DATABASE)
        return self.pool

    async def acquire(self) -> Connection:
        pool = self.database()
        try:
            conn: Connection = await pool.getconn()
        except Exception as exc:
            raise map_error(exc) from exc
        return conn

    async def release(self, conn: Connection) -> None:
        await self.database().putconn(conn)

    async def close(self) -> None:
        await self.engine.close()


async def probe_write_access(url: str) -> WriteAccess:
    """Whether the database at ``url`` accepts operator mutations (see ``WriteAccess``)."""
    return await pg_access.probe_write_access(url)


def normalize_url(url: str) -> str:
    """``url`` with a SQLAlchemy driver suffix (``postgresql+psycopg://``) removed."""
    return conninfo.normalize(url)


def check_url(url: str) -> None:
    """Parse ``url`` without connecting: a malformed connection string fails at client
    construction with ``DatabaseError`` (an unreachable one at the first database call)."""
    try:
        conninfo.parse(url)
    except conninfo.ConnInfoError as exc:
        raise DatabaseError(str(exc)) from None


async def check_reachable(url: str, *, timeout: float = ELIGIBILITY_TIMEOUT) -> None:
    """Connect once, so a wrong URL fails at once with the driver's reason rather than
    after a connection pool has retried for its whole timeout."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            conninfo.normalize(url), connect_timeout=max(1, int(timeout))
        )
    except (psycopg.Error, OSError) as exc:
        scrub_exception(exc, url)
        raise DatabaseError(
            f"could not connect to the database: {conninfo.scrub(str(exc), url)}"
        ) from exc
    await conn.close()


async def open_wiring(
    url: str,
    *,
    max_connections: int,
    pool_options: PoolOptions | None = None,
    policies: KindPolicies | None = None,
) -> Wiring:
    """Open the storage engine selected for this deployment: the transition-routing engine,
    which follows ``awa.storage_transition_state`` (canonical, mixed or queue storage).

    The schema is not checked here (see :func:`require_schema`): a client's own SQL
    transactions and its health check work on a database that was never migrated. An
    unreachable database raises ``DatabaseError`` naming the driver's reason."""
    from awa.entrypoints.routing import postgres_control_plane, postgres_routing

    await check_reachable(url)
    pool = await open_pool(url, max_connections=max_connections, options=pool_options)
    policies = policies if policies is not None else KindPolicies()
    clock = SystemClock()
    engine = postgres_routing(
        pool, url, clock=clock, backoff=Backoff(), policies=policies, owns_pool=True
    )
    return Wiring(
        url=url,
        engine=engine,
        control=postgres_control_plane(pool, clock),
        pool=pool,
        policies=policies,
    )


async def require_schema(wiring: Wiring) -> None:
    """Raise ``SchemaNotMigrated`` unless the wiring's database has the schema its engine
    needs (``run `awa migrate```). The in-memory client has no schema to check."""
    if wiring.pool is None:
        return
    from awa.entrypoints.routing import TRANSITION_SCHEMA_VERSION

    async with translated_errors(), wiring.pool.connection() as conn:
        await pg_migrations.require_schema(conn, minimum=TRANSITION_SCHEMA_VERSION)


async def migrate(url: str) -> bool:
    """Apply every pending schema migration to the database at ``url``. A database this
    call installs from nothing starts on queue storage (ADR 0020): returns whether it did.

    A database that already had a schema keeps its engine and the staged transition."""
    conn = await pg_connect(url)
    try:
        async with translated_errors():
            installed = await pg_migrations.applied_version(conn) > 0
    finally:
        await conn.close()
    await pg_migrations.migrate(url)
    if installed or not await activate_queue_storage_if_fresh(url):
        return False
    log.info("installed the schema on an empty database: queue storage (schema awa) is active")
    return True


async def awa_pg_refusal(url: str) -> str | None:
    """If awa-pg migrated the database at ``url``, what to tell the caller (the way to
    adopt it); else ``None``."""
    conn = await pg_connect(url)
    try:
        async with translated_errors():
            return await pg_migrations.awa_pg_refusal(conn)
    finally:
        await conn.close()


async def adopt_awa_pg(url: str) -> AdoptionReport:
    """Convert the database at ``url``, which awa-pg 0.6.9 migrated, into this package's
    schema in place, keeping every job (ADR 0019). The adopted database is on canonical
    storage; the staged transition moves it to queue storage."""
    async with translated_errors():
        return await pg_migrations.adopt(url)


async def install_queue_storage(
    url: str, schema: str, *, queue_slot_count: int, lease_slot_count: int, reset: bool
) -> None:
    """Install (or with ``reset`` rebuild) the queue-storage engine's tables in ``schema``."""
    from awa.adapters.postgres_queue_storage.install import (
        install_queue_storage as install_queue_storage_tables,
    )

    await install_queue_storage_tables(
        url,
        schema,
        queue_slot_count=queue_slot_count,
        lease_slot_count=lease_slot_count,
        reset=reset,
    )


async def activate_queue_storage_if_fresh(url: str, schema: str = "awa") -> bool:
    """Make queue storage the active engine when nothing lives in canonical storage yet
    (no jobs, no DLQ entries, no live runtime): a fresh install needs no transition."""
    conn = await pg_connect(url)
    try:
        async with translated_errors():
            return await pg_transition.auto_finalize_if_fresh(conn, schema)
    finally:
        await conn.close()


async def activate_queue_storage(url: str, schema: str) -> TransitionStatus:
    """Make queue storage in ``schema`` the active engine now (``install_queue_storage``'s
    "install and activate"); :class:`TransitionRefused` when a canonical job still needs
    a worker, a canonical-only runtime is live, or another active schema holds jobs."""
    conn = await pg_connect(url)
    try:
        return await pg_transition.activate(conn, schema)
    finally:
        await conn.close()


def migrations() -> list[tuple[int, str, str]]:
    """Every migration as ``(version, description, sql)``."""
    return [(int(v), str(d), str(s)) for v, d, s in pg_migrations.migrations()]


def migrations_range(from_version: int, to_version: int) -> list[tuple[int, str, str]]:
    """Migrations with ``from_version < version <= to_version``."""
    return [
        (int(v), str(d), str(s))
        for v, d, s in pg_migrations.migrations_range(from_version, to_version)
    ]


def schema_files() -> list[tuple[str, str]]:
    """Every schema file (a function or view of schema awa) as ``(path, sql)``, in the
    order ``migrate`` applies them after the migration stream."""
    return [(obj.path, obj.sql) for obj in pg_schema_objects.schema_objects()]


def current_migration_version() -> int:
    """The schema version this package migrates to."""
    return int(pg_migrations.current_migration_version())


@attrs.define
class RuntimePorts:
    """Notifier, leader lock and runtime registry for one worker runtime."""

    notifier: Notifier | None
    leader_lock: LeaderLock | None
    registry: RuntimeRegistry | None
    closers: list[Callable[[], Awaitable[None]]] = attrs.field(factory=list)

    async def close(self) -> None:
        for closer in reversed(self.closers):
            await closer()
        self.closers.clear()


def declare_pooler(url: str, pooler: str | None) -> str:
    """Say what ``url`` points at (``auto``, ``direct`` or ``transaction``; ``None``:
    ``$AWA_POOLER``, else ``auto``) for every connection this process opens to it.
    Raises ``ValueError`` naming the accepted values."""
    if pooler is None:
        pooler = os.environ.get(POOLER_ENV) or pg_pool.Pooler.AUTO.value
    return pg_pool.declare_pooler(url, pooler).value


def listen_url_from_env() -> str | None:
    """``$AWA_LISTEN_DATABASE_URL`` when set and not empty."""
    return os.environ.get(LISTEN_URL_ENV) or None


async def connection_mode(url: str) -> str:
    """``"transaction"`` when a connection to ``url`` goes through a transaction-mode
    pooler (declared or detected), else ``"direct"``."""
    conn = await pg_connect(url)
    try:
        return "transaction" if pg_pool.is_pooled(conn) else "direct"
    finally:
        await conn.close()


async def probe_wakeups(url: str, listen_url: str | None = None) -> tuple[str, str | None]:
    """How a worker on ``url`` (listening on ``listen_url``, default ``url``) would be
    woken: ``("listen", None)`` when a test notification comes back, else
    ``("polling", why)``."""
    notifier = PostgresNotifier(
        normalize_url(listen_url or url), clock=SystemClock(), probe_url=url
    )
    try:
        subscription = await notifier.subscribe([])
    except WakeupsUnavailable as exc:
        return "polling", exc.reason
    await subscription.close()
    return "listen", None


async def open_runtime_ports(
    wiring: Wiring,
    *,
    clock: Clock,
    transition_role: str = "auto",
    listen_url: str | None = None,
) -> RuntimePorts:
    """The notifier (``LISTEN awa:<queue>`` on a dedicated connection to ``listen_url``,
    default the wiring's URL; it proves a subscription with a test notification, see
    :mod:`awa.adapters._pg.notifier`) and a maintenance leader-lock candidate from the
    engine, plus the runtime registry (``awa.runtime_instances``) reporting
    ``transition_role`` and the engine's storage capability. Closing the ports removes
    the runtime's registry row. The notifier measures its waits on ``clock``, the
    runtime's."""
    engine = wiring.engine
    # Fixes what the runtime claims and reports, and lets a fresh install go active.
    await engine.bind_transition_role(transition_role)
    leader_lock: LeaderLock = engine.leader_lock()
    registry = PostgresRuntimeRegistry(
        wiring.database(),
        storage_capability=engine.storage_capability,
        transition_role=transition_role,
    )
    notifier = PostgresNotifier(
        normalize_url(listen_url or wiring.url), clock=clock, probe_url=wiring.url
    )
    ports = RuntimePorts(notifier=notifier, leader_lock=leader_lock, registry=registry)
    ports.closers.append(leader_lock.release)
    ports.closers.append(registry.close)
    return ports


#: The pool of each engine a worker opens for a thread of its own (heartbeat, maintenance).
THREAD_ENGINE_CONNECTIONS = 2
#: Dedicated connections of a worker: one ``LISTEN`` for every queue and for cancels, and
#: the one the maintenance leader's lease calls run on.
LISTEN_CONNECTIONS = 1
LEADER_CONNECTIONS = 1


async def _open_thread_backend(wiring: Wiring) -> Backend:
    """A small routing engine (``THREAD_ENGINE_CONNECTIONS``) with the wiring's per-kind
    policies and the control plane on its pool, on the wiring's database, for a thread
    with an event loop of its own (a pool belongs to the loop that opened it). Closing
    the engine closes the pool."""
    from awa.entrypoints.routing import open_postgres_backend

    opened = await open_postgres_backend(
        wiring.url,
        clock=SystemClock(),
        backoff=Backoff(),
        policies=wiring.policies,
        max_connections=THREAD_ENGINE_CONNECTIONS,
    )
    return Backend(opened.engine, opened.control)


def heartbeat_engine_factory(wiring: Wiring) -> EngineFactory:
    """Opens a second, two-connection engine for the heartbeat thread, so heartbeats keep
    flowing while a handler blocks the main event loop. Heartbeats find each attempt's
    engine by job id, so a fresh routing engine will do."""

    async def open_engine() -> StorageEngine:
        return (await _open_thread_backend(wiring)).engine

    return open_engine


def maintenance_engine_factory(wiring: Wiring) -> BackendFactory:
    """Opens the maintenance thread's own two-connection engine and control plane
    (promotion, rescue, cron, prune and batch operations run there, so a handler blocking
    the main event loop cannot stall them; ADR 0014). The routing engine follows the
    storage transition like the client's."""

    async def open_backend() -> Backend:
        return await _open_thread_backend(wiring)

    return open_backend


@attrs.frozen
class ConnectionBudget:
    """The most connections one worker process keeps open, by what opens them."""

    pool: int
    kept: int = MAX_KEPT_CONNECTIONS
    heartbeat: int = THREAD_ENGINE_CONNECTIONS
    maintenance: int = THREAD_ENGINE_CONNECTIONS
    listen: int = LISTEN_CONNECTIONS
    leader: int = LEADER_CONNECTIONS

    @property
    def total(self) -> int:
        return self.pool + self.kept + self.heartbeat + self.maintenance + self.listen + self.leader

    def describe(self) -> str:
        return (
            f"{self.total} connections (a pool of {self.pool}, the client's max_connections; "
            f"{self.kept} kept for queue-storage claims and completions; {self.heartbeat} "
            f"for the heartbeat thread; {self.maintenance} for the maintenance thread; "
            f"{self.listen} listening for wake-ups and cancels; {self.leader} for the "
            "maintenance leader's lease)"
        )


async def check_connection_limits(wiring: Wiring, max_connections: int) -> ConnectionBudget:
    """Raise :class:`ConnectionLimitTooLow` when a Postgres connection limit (the role's,
    the database's or the server's) is below what a worker with a pool of
    ``max_connections`` opens; warn when it is not, but the connections other sessions
    hold now leave too few. Returns the budget.

    Through a transaction-mode pooler these connections are the pooler's clients, and
    Postgres only sees the pooler's server connections (its ``default_pool_size``): the
    limits are the pooler's to respect, so nothing is checked here (ADR 0015)."""
    budget = ConnectionBudget(pool=max_connections)
    pool = wiring.database()
    async with pool.connection() as conn:
        through_pooler = pg_pool.is_pooled(conn)
    if through_pooler:
        log.info(
            "this worker opens up to %s through a transaction-mode pooler: Postgres' "
            "connection limits apply to the pooler's server connections, size its "
            "max_client_conn for the workers (docs/deployment.md)",
            budget.describe(),
        )
        return budget
    for limit in await pg_limits.connection_limits(pool):
        if budget.total > limit.limit:
            raise ConnectionLimitTooLow(
                f"this worker opens up to {budget.describe()}, but "
                f"{limit.scope} allows {limit.limit} ({limit.in_use} in use now): raise the "
                f"limit ({limit.remedy}) to at least {budget.total} per worker process, "
                "plus what other clients use, or give the client a smaller max_connections",
                needed=budget.total,
                limit=limit.limit,
                scope=limit.scope,
            )
        # This process's pool already counts against the limit.
        others = max(0, limit.in_use - pool.get_stats().get("pool_size", 0))
        if others + budget.total > limit.limit:
            log.warning(
                "this worker needs up to %d connections and other sessions hold %d of the "
                "%d that %s allows: claims will fail while the limit is reached; raise it "
                "(%s) or give the client a smaller max_connections",
                budget.total,
                others,
                limit.limit,
                limit.scope,
                limit.remedy,
            )
    return budget


async def ping(wiring: Wiring) -> bool:
    """Whether a pooled connection answers a round trip."""
    if wiring.pool is None:
        return False
    try:
        async with wiring.pool.connection() as conn:
            await pg_admin.ping(conn)
    except Exception:
        return False
    return True


async def connect_schema_admin(
    url: str, *, connect_timeout: int | None = None, clock: Clock | None = None
) -> SchemaAdmin:
    """The schema admin port on one dedicated connection to ``url`` (the CLI's, one per
    command), waiting on ``clock`` (the host's unless given); ``close()`` closes the
    connection."""
    return await pg_admin.connect_schema_admin(
        url, clock=clock if clock is not None else SystemClock(), connect_timeout=connect_timeout
    )


def schema_admin(wiring: Wiring) -> SchemaAdmin:
    """The schema admin port on the wiring's pool (a connection per call), waiting on the
    host's clock."""
    return pg_admin.pool_schema_admin(wiring.database(), SystemClock())


async def schema_version(wiring: Wiring) -> int:
    """The newest migration recorded in the client's database (0 when never migrated)."""
    async with wiring.database().connection() as conn:
        return await pg_migrations.applied_version(conn)


def schema_patches() -> list[tuple[str, str, str]]:
    """Out-of-band schema patches as ``(name, description, sql)``. Every schema change of
    this package ships in the numbered migration stream, so there are none."""
    return []
