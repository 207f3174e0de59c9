"""Composition root: picks the concrete storage engine and Postgres plumbing for a client.

Everything the public client needs from the outside world is opened here, so switching
the engine (canonical today, queue storage later) is a change to this module only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs
import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg import access as pg_access
from awa.adapters._pg import admin as pg_admin
from awa.adapters._pg import conninfo
from awa.adapters._pg import migrations as pg_migrations
from awa.adapters._pg import schema_objects as pg_schema_objects
from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.access import WriteAccess
from awa.adapters._pg.conninfo import scrub_exception
from awa.adapters._pg.errors import map_error, translated_errors
from awa.adapters._pg.pool import PoolOptions
from awa.adapters._pg.pool import connect as pg_connect
from awa.adapters._pg.runtime_registry import PostgresRuntimeRegistry
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import (
    install_queue_storage as install_queue_storage_tables,
)
from awa.domain.errors import DatabaseError
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import Backoff
from awa.ports.admin import SchemaAdmin
from awa.ports.leader import LeaderLock
from awa.ports.notifier import Notifier
from awa.ports.runtime_registry import RuntimeRegistry
from awa.ports.storage import StorageEngine, UnitOfWork
from awa.runtime.heartbeat import EngineFactory

Connection = psycopg.AsyncConnection[DictRow]

ELIGIBILITY_TIMEOUT = 10.0


class ClientEngine(StorageEngine, Protocol):
    """A storage engine that can also join a caller's open database transaction, and
    spreads producers' jobs over queue stripes (``stripes``) where queue storage takes
    them. ``validated=True`` tells it the specs already passed ``validate_spec`` (the
    client builds them that way), so they are not checked again."""

    def unit_of_work_for(self, conn: Connection) -> UnitOfWork: ...

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = 1,
        validated: bool = False,
    ) -> list[JobRecord]: ...

    async def enqueue_many_skip_duplicates(
        self, specs: Sequence[JobSpec], *, stripes: int = 1, validated: bool = False
    ) -> list[JobRecord]: ...

    async def enqueue_many_copy(
        self, specs: Sequence[JobSpec], *, stripes: int = 1, validated: bool = False
    ) -> int: ...

    @property
    def pool(self) -> AsyncConnectionPool[Connection]: ...


@attrs.define
class Wiring:
    """The engine, whose connection pool also serves client transactions and raw SQL."""

    url: str
    engine: ClientEngine

    @property
    def pool(self) -> AsyncConnectionPool[Connection]:
        return self.engine.pool

    async def acquire(self) -> Connection:
        try:
            conn: Connection = await self.pool.getconn()
        except Exception as exc:
            raise map_error(exc) from exc
        return conn

    async def release(self, conn: Connection) -> None:
        await self.pool.putconn(conn)

    async def enqueue(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None
    ) -> list[JobRecord]:
        return await self.engine.enqueue_many(specs, uow=uow)

    async def close(self) -> None:
        await self.engine.close()


async def probe_write_access(url: str) -> WriteAccess:
    """Whether the database at ``url`` accepts operator mutations (see ``WriteAccess``)."""
    return await pg_access.probe_write_access(url)


def runtime_registry(wiring: Wiring) -> RuntimeRegistry:
    """Read access to the runtimes' published snapshots, through the wiring's pool."""
    return PostgresRuntimeRegistry(wiring.pool)


def normalize_url(url: str) -> str:
    """``url`` with a SQLAlchemy driver suffix (``postgresql+psycopg://``) removed."""
    return conninfo.normalize(url)


def check_reachable(url: str, *, timeout: float = ELIGIBILITY_TIMEOUT) -> None:
    """Connect once, synchronously, so a bad URL fails at client construction."""
    try:
        conn = psycopg.connect(conninfo.normalize(url), connect_timeout=max(1, int(timeout)))
    except (psycopg.Error, OSError) as exc:
        scrub_exception(exc, url)
        raise DatabaseError(
            f"could not connect to the database: {conninfo.scrub(str(exc), url)}"
        ) from exc
    conn.close()


async def open_wiring(
    url: str, *, max_connections: int, pool_options: PoolOptions | None = None
) -> Wiring:
    """Open the storage engine selected for this deployment: the transition-routing engine,
    which follows ``awa.storage_transition_state`` (canonical, mixed or queue storage)."""
    from awa.adapters.routing_engine import TransitionRoutingEngine

    engine: Any = await TransitionRoutingEngine.open(
        url,
        clock=SystemClock(),
        backoff=Backoff(),
        max_connections=max_connections,
        pool_options=pool_options,
    )
    return Wiring(url=url, engine=engine)


async def migrate(url: str) -> None:
    """Apply every pending schema migration to the database at ``url``."""
    await pg_migrations.migrate(url)


async def install_queue_storage(
    url: str, schema: str, *, queue_slot_count: int, lease_slot_count: int, reset: bool
) -> None:
    """Install (or with ``reset`` rebuild) the queue-storage engine's tables in ``schema``."""
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


async def open_runtime_ports(wiring: Wiring, *, transition_role: str = "auto") -> RuntimePorts:
    """The notifier (``LISTEN awa:<queue>``) and a maintenance leader-lock candidate,
    both provided by the engine on dedicated connections, plus the runtime registry
    (``awa.runtime_instances``) reporting ``transition_role`` and the engine's storage
    capability. Closing the ports removes the runtime's registry row."""
    engine: Any = wiring.engine
    bind_role = getattr(engine, "bind_transition_role", None)
    if callable(bind_role):
        # Fixes what the runtime claims and reports, and lets a fresh install go active.
        await bind_role(transition_role)
    notifier: Notifier | None = engine if callable(getattr(engine, "subscribe", None)) else None
    make_lock = getattr(engine, "leader_lock", None)
    leader_lock: LeaderLock | None = make_lock() if callable(make_lock) else None
    registry_factory = getattr(engine, "runtime_registry", None)
    registry: RuntimeRegistry | None
    if callable(registry_factory):
        registry = registry_factory()
    else:
        registry = PostgresRuntimeRegistry(
            wiring.pool,
            storage_capability=storage_capability(engine, transition_role),
            transition_role=transition_role,
        )
    ports = RuntimePorts(notifier=notifier, leader_lock=leader_lock, registry=registry)
    if leader_lock is not None:
        ports.closers.append(leader_lock.release)
    registry_close = getattr(registry, "close", None)
    if callable(registry_close):
        ports.closers.append(registry_close)
    return ports


def read_runtime_registry(wiring: Wiring) -> RuntimeRegistry:
    """A registry for reading ``awa.runtime_instances`` (admin reads; writes nothing)."""
    return PostgresRuntimeRegistry(wiring.pool)


def storage_capability(engine: object, transition_role: str) -> str:
    """What a runtime on ``engine`` started with ``transition_role`` can serve, as
    reported in ``awa.runtime_instances.storage_capability``."""
    declared = getattr(engine, "storage_capability", None)
    if isinstance(declared, str):
        return declared
    from awa.adapters.postgres_canonical import CanonicalEngine

    if isinstance(engine, CanonicalEngine):
        return "canonical_drain_only" if transition_role == "canonical_drain" else "canonical"
    return "queue_storage"


def heartbeat_engine_factory(wiring: Wiring) -> EngineFactory | None:
    """Opens a second, two-connection engine for the heartbeat thread, so heartbeats keep
    flowing while a handler blocks the main event loop. ``None`` for engines that cannot
    be duplicated this way (their heartbeats then run on the main loop)."""
    from awa.adapters.postgres_canonical import CanonicalEngine
    from awa.adapters.routing_engine import TransitionRoutingEngine

    url = wiring.url
    if isinstance(wiring.engine, TransitionRoutingEngine):

        async def open_routing() -> StorageEngine:
            # Heartbeats find each attempt's engine by job id, so a fresh engine will do.
            return await TransitionRoutingEngine.open(
                url, clock=SystemClock(), backoff=Backoff(), max_connections=2
            )

        return open_routing
    if not isinstance(wiring.engine, CanonicalEngine):
        return None

    async def open_engine() -> StorageEngine:
        return await CanonicalEngine.open(
            url, clock=SystemClock(), backoff=Backoff(), max_connections=2
        )

    return open_engine


async def ping(wiring: Wiring) -> bool:
    """Whether a pooled connection answers a round trip."""
    try:
        async with wiring.pool.connection() as conn:
            await pg_admin.ping(conn)
    except Exception:
        return False
    return True


async def connect_schema_admin(url: str, *, connect_timeout: int | None = None) -> SchemaAdmin:
    """The schema admin port on one dedicated connection to ``url`` (the CLI's, one per
    command); ``close()`` closes the connection."""
    return await pg_admin.connect_schema_admin(url, connect_timeout=connect_timeout)


def schema_admin(wiring: Wiring) -> SchemaAdmin:
    """The schema admin port on the wiring's pool (a connection per call)."""
    return pg_admin.pool_schema_admin(wiring.pool)


async def schema_version(wiring: Wiring) -> int:
    """The newest migration recorded in the client's database (0 when never migrated)."""
    async with wiring.pool.connection() as conn:
        return await pg_migrations.applied_version(conn)


def schema_patches() -> list[tuple[str, str, str]]:
    """Out-of-band schema patches as ``(name, description, sql)``. Every schema change of
    this package ships in the numbered migration stream, so there are none."""
    return []
