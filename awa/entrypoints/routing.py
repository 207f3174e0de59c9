"""Composition of the routing engine (ADR 0001, ADR 0007).

The routing engine (:mod:`awa.adapters.routing`) knows its engines, their shared store
and the transition state only through ports; this module hands it concrete ones:

* :func:`open_postgres_routing` / :func:`postgres_routing`: the canonical engine and the
  queue-storage engine of each schema on one connection pool, with the Postgres
  transactions, transition state and one-statement insert (what every client runs);
* :func:`inmemory_routing`: two in-memory engines on one in-memory store and an
  in-memory transition state, the same routing without a database.

Beside the engines, each backend gets its control plane once
(:func:`postgres_control_plane`, :func:`inmemory_control_plane`): the stores every engine
of the backend shares, handed to the client and the runtime next to the engine.
"""

from __future__ import annotations

import attrs

from awa.adapters._pg.batch_ops import PgBatchOperationStore
from awa.adapters._pg.cron import PgCronStore
from awa.adapters._pg.descriptors import PgDescriptorStore
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.migrations import require_schema
from awa.adapters._pg.overrides import PgQueueOverrideStore
from awa.adapters._pg.pool import DictPool, PoolOptions, open_pool
from awa.adapters._pg.rate_limits import PgRateLimiterReader
from awa.adapters._pg.relations import PgJobRelations
from awa.adapters._pg.results import PgResultStore
from awa.adapters._pg.routing import AnyConnection, PgRoutedInsert, PgTransactions
from awa.adapters._pg.runtime_registry import PostgresRuntimeRegistry
from awa.adapters._pg.samples import PgQueueSampleStore
from awa.adapters._pg.transition import PgTransitionState
from awa.adapters.clock import SystemClock
from awa.adapters.inmemory import (
    InMemoryBatchOperationStore,
    InMemoryCronStore,
    InMemoryDescriptorStore,
    InMemoryEngine,
    InMemoryQueueOverrideStore,
    InMemoryQueueSampleStore,
    InMemoryResultStore,
    InMemoryTransaction,
    InMemoryTransactions,
    InMemoryTransition,
    SharedStore,
)
from awa.adapters.inmemory.rate_limiters import InMemoryRateLimiterReader
from awa.adapters.inmemory.relations import InMemoryJobRelations
from awa.adapters.inmemory.runtime_registry import InMemoryRuntimeRegistry
from awa.adapters.inmemory.store import CANONICAL_SIDE, queue_storage_side
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.routing import DEFAULT_REFRESH_INTERVAL, TransitionRoutingEngine
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import Backoff
from awa.ports.clock import Clock
from awa.ports.control_plane import ControlPlane

#: The first schema version with the transition functions.
TRANSITION_SCHEMA_VERSION = 200

PostgresRouting = TransitionRoutingEngine[AnyConnection]
InMemoryRoutingEngine = TransitionRoutingEngine[InMemoryTransaction]


async def open_postgres_routing(
    url: str,
    *,
    clock: Clock | None = None,
    backoff: Backoff | None = None,
    policies: KindPolicies | None = None,
    max_connections: int = 10,
    refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
    pool_options: PoolOptions | None = None,
) -> PostgresRouting:
    """Open a pool on ``url``, check the schema has the transition functions and build
    the routing engine on it (closing the engine closes the pool). ``policies``: the
    process's per-kind policies, shared by every engine it composes."""
    backend = await open_postgres_backend(
        url,
        clock=clock,
        backoff=backoff,
        policies=policies,
        max_connections=max_connections,
        refresh_interval=refresh_interval,
        pool_options=pool_options,
    )
    return backend.engine


@attrs.frozen
class PostgresBackend:
    """The routing engine over a database and the database's control plane, on one pool
    (closing the engine closes it)."""

    engine: PostgresRouting
    control: ControlPlane


async def open_postgres_backend(
    url: str,
    *,
    clock: Clock | None = None,
    backoff: Backoff | None = None,
    policies: KindPolicies | None = None,
    max_connections: int = 10,
    refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
    pool_options: PoolOptions | None = None,
) -> PostgresBackend:
    """As :func:`open_postgres_routing`, with the control plane on the same pool."""
    pool = await open_routing_pool(url, max_connections=max_connections, options=pool_options)
    clock = clock if clock is not None else SystemClock()
    engine = postgres_routing(
        pool,
        url,
        clock=clock,
        backoff=backoff,
        policies=policies,
        refresh_interval=refresh_interval,
        owns_pool=True,
    )
    return PostgresBackend(engine, postgres_control_plane(pool, clock))


async def open_routing_pool(
    url: str, *, max_connections: int = 10, options: PoolOptions | None = None
) -> DictPool:
    """A pool on ``url`` whose schema has the transition functions (checked once)."""
    pool = await open_pool(url, max_connections=max_connections, options=options)
    try:
        async with translated_errors(), pool.connection() as conn:
            await require_schema(conn, minimum=TRANSITION_SCHEMA_VERSION)
    except BaseException:
        await pool.close()
        raise
    return pool


def postgres_routing(
    pool: DictPool,
    url: str,
    *,
    clock: Clock | None = None,
    backoff: Backoff | None = None,
    policies: KindPolicies | None = None,
    refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
    owns_pool: bool = False,
) -> PostgresRouting:
    """The routing engine over the Postgres engines on ``pool`` (the database at
    ``url``). With the system clock, single inserts take ``awa.insert_job_compat`` in one
    round trip (it times them by the database clock, so a manual clock does not). Every
    engine it composes reads the same ``policies``."""
    clock = clock if clock is not None else SystemClock()
    backoff = backoff if backoff is not None else Backoff()
    policies = policies if policies is not None else KindPolicies()
    engines: dict[str, QueueStorageEngine] = {}

    def queue_storage(schema: str) -> QueueStorageEngine:
        engine = engines.get(schema)
        if engine is None:
            engine = engines[schema] = QueueStorageEngine(
                pool, url, clock=clock, backoff=backoff, policies=policies, schema=schema
            )
        return engine

    async def close() -> None:
        for engine in engines.values():
            # Let their work in flight finish without closing the shared pool twice.
            await engine.retire()
        if owns_pool:
            await pool.close()

    return TransitionRoutingEngine(
        canonical=CanonicalEngine(pool, clock=clock, backoff=backoff, policies=policies),
        queue_storage=queue_storage,
        transactions=PgTransactions(pool),
        transition=PgTransitionState(pool),
        clock=clock,
        routed_insert=PgRoutedInsert(pool) if isinstance(clock, SystemClock) else None,
        refresh_interval=refresh_interval,
        on_close=close,
    )


def postgres_control_plane(pool: DictPool, clock: Clock) -> ControlPlane:
    """The control-plane stores of the database behind ``pool`` (shared by its engines)."""
    return ControlPlane(
        batch_operations=PgBatchOperationStore(pool, clock),
        cron=PgCronStore(pool, clock),
        overrides=PgQueueOverrideStore(pool, clock),
        descriptors=PgDescriptorStore(pool, clock),
        queue_samples=PgQueueSampleStore(pool),
        results=PgResultStore(pool, clock),
        registry=PostgresRuntimeRegistry(pool),
        relations=PgJobRelations(pool),
        rate_limiters=PgRateLimiterReader(pool),
    )


def inmemory_control_plane(home: InMemoryEngine, clock: Clock) -> ControlPlane:
    """The control-plane stores of the in-memory backend ``home`` belongs to: its queue
    overrides are kept with the queue settings of ``home``'s store, and a cron fire
    inserts through ``home`` as that store routes producers."""
    return ControlPlane(
        batch_operations=InMemoryBatchOperationStore(clock),
        cron=InMemoryCronStore(home, clock),
        overrides=InMemoryQueueOverrideStore(home.store),
        descriptors=InMemoryDescriptorStore(clock),
        queue_samples=InMemoryQueueSampleStore(),
        results=InMemoryResultStore(clock),
        registry=InMemoryRuntimeRegistry(clock),
        relations=InMemoryJobRelations(home.store),
        rate_limiters=InMemoryRateLimiterReader(home.store),
    )


@attrs.frozen
class InMemoryRouting:
    """routing(inmemory, inmemory): the engine, the transition state it follows (whose
    steps a test takes), the store under both and the backend's control plane."""

    engine: InMemoryRoutingEngine
    transition: InMemoryTransition
    store: SharedStore
    control: ControlPlane


def inmemory_routing(
    clock: Clock,
    backoff: Backoff | None = None,
    *,
    refresh_interval: float = 0.0,
    policies: KindPolicies | None = None,
) -> InMemoryRouting:
    """The routing engine over a canonical and a queue-storage in-memory engine sharing
    one store (and ``policies``), starting in state ``canonical``."""
    store = SharedStore()
    policies = policies if policies is not None else KindPolicies()
    canonical = InMemoryEngine(clock, backoff, store=store, side=CANONICAL_SIDE, policies=policies)
    engines: dict[str, InMemoryEngine] = {}

    def queue_storage(schema: str) -> InMemoryEngine:
        engine = engines.get(schema)
        if engine is None:
            engine = engines[schema] = InMemoryEngine(
                clock, backoff, store=store, side=queue_storage_side(schema), policies=policies
            )
        return engine

    async def close() -> None:
        for engine in (canonical, *engines.values()):
            await engine.close()

    transition = InMemoryTransition(store, clock)
    engine = TransitionRoutingEngine(
        canonical=canonical,
        queue_storage=queue_storage,
        transactions=InMemoryTransactions(),
        transition=transition,
        clock=clock,
        refresh_interval=refresh_interval,
        on_close=close,
    )
    return InMemoryRouting(engine, transition, store, inmemory_control_plane(canonical, clock))
