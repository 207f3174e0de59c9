"""The storage engines the contract suite runs against.

Each entry of :data:`ENGINES` builds an :class:`EngineHandle` around a fresh engine on a
:class:`ManualClock` and a jitter-free :class:`Backoff`, so every test is deterministic.
An engine backed by Postgres sets ``needs_database`` and receives the per-test database
URL; adding one is a single :func:`register` call, e.g.::

    @asynccontextmanager
    async def _canonical(clock, backoff, url):
        engine = await CanonicalEngine.connect(url, clock=clock, backoff=backoff)
        try:
            async with postgres_control(url, clock) as control:
                yield EngineHandle(
                    "postgres_canonical", engine, clock, engine, engine.leader_lock, control
                )
        finally:
            await engine.close()

    register("postgres_canonical", _canonical, needs_database=True)

The routing engine (what every client runs) is registered once per transition state it
tells apart (canonical, mixed_transition, active): over the Postgres engines
(``routing_canonical``, ``routing_mixed``, ``routing_queue_storage``) and over two
in-memory engines sharing one store (``routing_inmemory_<state>``, no database).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta

import attrs
from psycopg.conninfo import conninfo_to_dict

from awa.adapters._pg.migrations import migrate
from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.inmemory.store import SharedStore
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.batch_ops import BatchOpState
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import Backoff
from awa.domain.transition import RuntimeView, StorageCapability, TransitionState
from awa.entrypoints.routing import inmemory_control_plane, postgres_control_plane
from awa.ports.control_plane import ControlPlane
from awa.ports.leader import LeaderLock
from awa.ports.notifier import Notifier
from awa.ports.storage import StorageEngine
from tests.support.pg import on_release

#: The retry policy every contract engine uses: ``2^attempt`` seconds exactly.
CONTRACT_BACKOFF = Backoff(jitter=lambda: 0.0)


@attrs.frozen
class EngineHandle:
    """An engine under test, the clock it reads and the notifier carrying its events.

    ``leader_lock`` makes a new, independent candidate for the engine's maintenance
    leadership (each call is a different would-be leader); ``control`` is the control
    plane of the engine's backend (the stores its runtime is handed beside it).
    """

    name: str
    engine: StorageEngine
    clock: ManualClock
    notifier: Notifier
    leader_lock: Callable[[], LeaderLock]
    control: ControlPlane
    #: The database a Postgres engine runs on (``None`` for the in-memory engine), for
    #: tests that must write what the engine would refuse (rows from older releases).
    database_url: str | None = None
    #: The per-kind policies the engine's lifecycle decisions read (tests register
    #: retry policies and effect rules here).
    policies: KindPolicies = attrs.field(factory=KindPolicies)
    #: The in-memory "database" of an in-memory engine (``None`` on Postgres), for tests
    #: that must change it as no write of the engine does (a job gone without a word).
    store: SharedStore | None = None


EngineFactory = Callable[
    [ManualClock, Backoff, str | None], AbstractAsyncContextManager[EngineHandle]
]


@attrs.frozen
class EngineEntry:
    name: str
    factory: EngineFactory
    needs_database: bool = False


ENGINES: dict[str, EngineEntry] = {}


def register(name: str, factory: EngineFactory, *, needs_database: bool = False) -> None:
    if name in ENGINES:
        raise ValueError(f"engine {name!r} is already registered")
    ENGINES[name] = EngineEntry(name, factory, needs_database)


@asynccontextmanager
async def open_engine(name: str, database_url: str | None = None) -> AsyncIterator[EngineHandle]:
    """Build a fresh engine by name with a new ManualClock and the contract backoff."""
    entry = ENGINES[name]
    if entry.needs_database and database_url is None:
        raise ValueError(f"engine {name!r} needs a database URL")
    async with entry.factory(ManualClock(), CONTRACT_BACKOFF, database_url) as handle:
        yield handle


#: What this process has already done to a database, as ``(database name, step)``:
#: migrating it, installing queue storage, taking it to a transition state. The contract
#: suite opens an engine per test on one database per engine for the whole session; each
#: step is idempotent, so repeating it per test would only cost connections and round
#: trips (a migration check alone opens one). Every engine still opens its own pools, and
#: the routing engines still check the transition state they were asked for. Keyed by
#: name, not URL, so a direct and a pooled URL of one database share it; a database the
#: factory releases is forgotten (:func:`forget_prepared`): it comes back under the same
#: name put back to its template, with none of these steps done.
_PREPARED: set[tuple[str, str]] = set()


def _database_name(database_url: str) -> str:
    return str(conninfo_to_dict(database_url).get("dbname", ""))


def prepared(database_url: str, step: str) -> bool:
    """Whether ``step`` already ran on ``database_url`` in this process."""
    return (_database_name(database_url), step) in _PREPARED


def forget_prepared(name: str) -> None:
    """Forget every step done to the database ``name`` (it is being put back or dropped)."""
    _PREPARED.difference_update({key for key in _PREPARED if key[0] == name})


on_release(forget_prepared)


async def prepare_once(
    database_url: str, step: str, action: Callable[[], Awaitable[object]]
) -> None:
    """Run ``action`` unless ``step`` already succeeded on ``database_url`` in this
    process (a failed one is tried again by the next caller)."""
    if prepared(database_url, step):
        return
    await action()
    _PREPARED.add((_database_name(database_url), step))


@asynccontextmanager
async def postgres_control(database_url: str, clock: ManualClock) -> AsyncIterator[ControlPlane]:
    """The control plane of the database at ``database_url``, on a small pool of its own
    (for an engine opened alone, whose pool is its own). The pool connects on first use:
    most tests never reach the control plane."""
    pool = await open_pool(database_url, max_connections=2, min_connections=0)
    try:
        yield postgres_control_plane(pool, clock)
    finally:
        await pool.close()


async def forget_control_plane(control: ControlPlane, clock: ManualClock) -> None:
    """Empty the control plane through its ports (an engine's ``reset`` clears only the
    queue overrides): every schedule, override, descriptor and queue sample is deleted,
    unfinished batch operations are cancelled, then every operation is purged."""
    for job in await control.cron.list_cron_jobs():
        await control.cron.delete_cron_job(job.name)
    for queue in await control.overrides.list_queue_overrides():
        await control.overrides.clear_queue_overrides(queue)
    await control.descriptors.delete_descriptors_unseen_since(
        clock.now() + timedelta(days=365 * 100)
    )
    await control.queue_samples.prune_queue_samples(before=clock.now() + timedelta(days=3650))
    await control.results.prune_results(before=clock.now() + timedelta(days=3650))
    store = control.batch_operations
    for op in await store.list_batch_operations(limit=100_000):
        if not op.state.is_final:
            await store.finish_batch_operation(
                op.id, state=BatchOpState.CANCELLED, retention=timedelta(0)
            )
    await store.purge_batch_operations(before=clock.now() + timedelta(days=365), limit=100_000)


@asynccontextmanager
async def _inmemory(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    policies = KindPolicies()
    engine = InMemoryEngine(clock, backoff, policies=policies)
    try:
        yield EngineHandle(
            "inmemory",
            engine,
            clock,
            engine,
            engine.leader_lock,
            inmemory_control_plane(engine, clock),
            policies=policies,
            store=engine.store,
        )
    finally:
        await engine.close()


register("inmemory", _inmemory)


@asynccontextmanager
async def _postgres_canonical(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    assert database_url is not None
    url = database_url
    await prepare_once(url, "migrate", lambda: migrate(url))
    policies = KindPolicies()
    engine = await CanonicalEngine.open(
        database_url, clock=clock, backoff=backoff, policies=policies
    )
    try:
        async with postgres_control(database_url, clock) as control:
            yield EngineHandle(
                "postgres_canonical",
                engine,
                clock,
                engine,
                engine.leader_lock,
                control,
                database_url,
                policies=policies,
            )
    finally:
        await engine.close()


register("postgres_canonical", _postgres_canonical, needs_database=True)


@asynccontextmanager
async def _queue_storage(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    from awa.adapters.postgres_queue_storage import QueueStorageEngine
    from awa.adapters.postgres_queue_storage.install import DEFAULT_SCHEMA

    assert database_url is not None
    policies = KindPolicies()
    if prepared(database_url, "queue_storage"):
        # Installed by an earlier open in this process: only the pool is new.
        engine = QueueStorageEngine(
            await open_pool(database_url),
            database_url,
            clock=clock,
            backoff=backoff,
            schema=DEFAULT_SCHEMA,
            policies=policies,
        )
    else:
        engine = await QueueStorageEngine.open(
            database_url, clock=clock, backoff=backoff, policies=policies
        )
        _PREPARED.add((_database_name(database_url), "queue_storage"))
    try:
        async with postgres_control(database_url, clock) as control:
            yield EngineHandle(
                "postgres_queue_storage",
                engine,
                clock,
                engine,
                engine.leader_lock,
                control,
                database_url,
                policies=policies,
            )
    finally:
        await engine.close()


register("postgres_queue_storage", _queue_storage, needs_database=True)


@asynccontextmanager
async def _routing(
    clock: ManualClock, backoff: Backoff, database_url: str | None, *, state: TransitionState
) -> AsyncIterator[EngineHandle]:
    """The engine every client runs, over the Postgres engines, with the database in
    transition state ``state`` (canonical, mixed_transition or active)."""
    from awa.entrypoints import bootstrap
    from awa.entrypoints.routing import open_postgres_backend

    assert database_url is not None
    url = database_url
    await prepare_once(url, "migrate", lambda: migrate(url))
    if state is TransitionState.ACTIVE:

        async def activate() -> None:
            await bootstrap.install_queue_storage(
                url, "awa", queue_slot_count=16, lease_slot_count=8, reset=False
            )
            # The contract suite reuses one database per engine (reset between tests),
            # so only the first call finds it fresh.
            await bootstrap.activate_queue_storage_if_fresh(url, "awa")

        await prepare_once(url, state.value, activate)
    elif state is TransitionState.MIXED_TRANSITION:
        await prepare_once(url, state.value, lambda: _enter_mixed_transition(url))
    policies = KindPolicies()
    backend = await open_postgres_backend(
        database_url, clock=clock, backoff=backoff, policies=policies
    )
    engine = backend.engine
    try:
        assert (await engine.status(max_age=0.0)).state is state
        yield EngineHandle(
            ROUTING_NAMES[state],
            engine,
            clock,
            engine,
            engine.leader_lock,
            backend.control,
            database_url=database_url,
            policies=policies,
        )
    finally:
        await engine.close()


async def _enter_mixed_transition(database_url: str) -> None:
    """Take a database from canonical to ``mixed_transition`` (once; the contract suite
    reuses it), with the live queue-storage runtime the gate asks for registered."""
    from awa.adapters._pg import transition as pg_transition
    from awa.adapters._pg.pool import connect

    conn = await connect(database_url)
    try:
        status = await pg_transition.read_status(conn)
        if status.state is TransitionState.MIXED_TRANSITION:
            return
        await pg_transition.prepare(conn, "queue_storage")
        await conn.execute(
            "INSERT INTO awa.runtime_instances (id, version, storage_capability) "
            "VALUES (gen_random_uuid(), 'contract', 'queue_storage')"
        )
        await pg_transition.enter_mixed_transition(conn)
    finally:
        await conn.close()


ROUTING_NAMES = {
    TransitionState.CANONICAL: "routing_canonical",
    TransitionState.MIXED_TRANSITION: "routing_mixed",
    TransitionState.ACTIVE: "routing_queue_storage",
}


def _routing_in(state: TransitionState) -> EngineFactory:
    @asynccontextmanager
    async def factory(
        clock: ManualClock, backoff: Backoff, database_url: str | None
    ) -> AsyncIterator[EngineHandle]:
        async with _routing(clock, backoff, database_url, state=state) as handle:
            yield handle

    return factory


for _state, _name in ROUTING_NAMES.items():
    register(_name, _routing_in(_state), needs_database=True)

#: Engines that reach Postgres through the session's PgBouncer in transaction mode: the
#: contract suite's ``engine`` fixture hands them the pooled URL of their database, and a
#: notifier that listens on the database directly, as a worker's ``listen_database_url``
#: does (ADR 0015). The routing engine over queue storage is what every client runs.
POOLED = frozenset({"routing_queue_storage_pooled"})
register("routing_queue_storage_pooled", _routing_in(TransitionState.ACTIVE), needs_database=True)


#: A live runtime that can execute queue storage (what enter-mixed-transition asks for).
_QUEUE_STORAGE_RUNTIME = RuntimeView(StorageCapability.QUEUE_STORAGE, live=True)


def _inmemory_routing_in(state: TransitionState) -> EngineFactory:
    """routing(inmemory, inmemory) with its in-memory store in transition state ``state``."""

    @asynccontextmanager
    async def factory(
        clock: ManualClock, backoff: Backoff, database_url: str | None
    ) -> AsyncIterator[EngineHandle]:
        from awa.entrypoints.routing import inmemory_routing

        policies = KindPolicies()
        routing = inmemory_routing(clock, backoff, policies=policies)
        if state is TransitionState.ACTIVE:
            assert await routing.transition.activate_if_fresh()
        elif state is TransitionState.MIXED_TRANSITION:
            routing.transition.prepare()
            routing.transition.enter_mixed_transition([_QUEUE_STORAGE_RUNTIME])
        engine = routing.engine
        try:
            assert (await engine.status()).state is state
            yield EngineHandle(
                f"routing_inmemory_{state.value}",
                engine,
                clock,
                engine,
                engine.leader_lock,
                routing.control,
                policies=policies,
                store=routing.store,
            )
        finally:
            await engine.close()

    return factory


for _state in ROUTING_NAMES:
    register(f"routing_inmemory_{_state.value}", _inmemory_routing_in(_state))
