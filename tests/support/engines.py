"""The storage engines the contract suite runs against.

Each entry of :data:`ENGINES` builds an :class:`EngineHandle` around a fresh engine on a
:class:`ManualClock` and a jitter-free :class:`Backoff`, so every test is deterministic.
An engine backed by Postgres sets ``needs_database`` and receives the per-test database
URL; adding one is a single :func:`register` call, e.g.::

    @asynccontextmanager
    async def _canonical(clock, backoff, url):
        engine = await CanonicalEngine.connect(url, clock=clock, backoff=backoff)
        try:
            yield EngineHandle("postgres_canonical", engine, clock, engine, engine.leader_lock)
        finally:
            await engine.close()

    register("postgres_canonical", _canonical, needs_database=True)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs

from awa.adapters._pg.migrations import migrate
from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.policies import Backoff
from awa.ports.leader import LeaderLock
from awa.ports.notifier import Notifier
from awa.ports.storage import StorageEngine

#: The retry policy every contract engine uses: ``2^attempt`` seconds exactly.
CONTRACT_BACKOFF = Backoff(jitter=lambda: 0.0)


@attrs.frozen
class EngineHandle:
    """An engine under test, the clock it reads and the notifier carrying its events.

    ``leader_lock`` makes a new, independent candidate for the engine's maintenance
    leadership (each call is a different would-be leader).
    """

    name: str
    engine: StorageEngine
    clock: ManualClock
    notifier: Notifier
    leader_lock: Callable[[], LeaderLock]
    #: The database a Postgres engine runs on (``None`` for the in-memory engine), for
    #: tests that must write what the engine would refuse (rows from older releases).
    database_url: str | None = None


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


@asynccontextmanager
async def _inmemory(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    engine = InMemoryEngine(clock, backoff)
    try:
        yield EngineHandle("inmemory", engine, clock, engine, engine.leader_lock)
    finally:
        await engine.close()


register("inmemory", _inmemory)


@asynccontextmanager
async def _postgres_canonical(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    assert database_url is not None
    await migrate(database_url)
    engine = await CanonicalEngine.open(database_url, clock=clock, backoff=backoff)
    try:
        yield EngineHandle(
            "postgres_canonical", engine, clock, engine, engine.leader_lock, database_url
        )
    finally:
        await engine.close()


register("postgres_canonical", _postgres_canonical, needs_database=True)


@asynccontextmanager
async def _queue_storage(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    from awa.adapters.postgres_queue_storage import QueueStorageEngine

    assert database_url is not None
    engine = await QueueStorageEngine.open(database_url, clock=clock, backoff=backoff)
    try:
        yield EngineHandle(
            "postgres_queue_storage", engine, clock, engine, engine.leader_lock, database_url
        )
    finally:
        await engine.close()


register("postgres_queue_storage", _queue_storage, needs_database=True)


@asynccontextmanager
async def _routing(
    clock: ManualClock, backoff: Backoff, database_url: str | None, *, queue_storage: bool
) -> AsyncIterator[EngineHandle]:
    """The engine every client runs: it routes by the storage-transition state."""
    from awa.adapters.routing_engine import TransitionRoutingEngine
    from awa.entrypoints import bootstrap

    assert database_url is not None
    await migrate(database_url)
    if queue_storage:
        await bootstrap.install_queue_storage(
            database_url, "awa", queue_slot_count=16, lease_slot_count=8, reset=False
        )
        # The contract suite reuses one database per engine (reset between tests), so
        # only the first call finds it fresh.
        await bootstrap.activate_queue_storage_if_fresh(database_url, "awa")
    engine = await TransitionRoutingEngine.open(database_url, clock=clock, backoff=backoff)
    name = "routing_queue_storage" if queue_storage else "routing_canonical"
    try:
        expected = "queue_storage" if queue_storage else "canonical"
        assert (await engine.status(max_age=0.0)).active_engine == expected
        yield EngineHandle(name, engine, clock, engine, engine.leader_lock)
    finally:
        await engine.close()


@asynccontextmanager
async def _routing_canonical(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    async with _routing(clock, backoff, database_url, queue_storage=False) as handle:
        yield handle


@asynccontextmanager
async def _routing_queue_storage(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    async with _routing(clock, backoff, database_url, queue_storage=True) as handle:
        yield handle


register("routing_canonical", _routing_canonical, needs_database=True)
register("routing_queue_storage", _routing_queue_storage, needs_database=True)
