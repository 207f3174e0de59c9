"""The ``engine`` fixture: one fresh engine per test, parametrized over every registered
engine, one of them through a real PgBouncer in transaction mode
(``routing_queue_storage_pooled``, skipped where pgbouncer is not installed).

Postgres engines share one migrated database per engine for the whole session and start
every test from :meth:`~awa.ports.storage.StorageEngine.reset`, which empties every job,
DLQ entry, unique claim and queue setting. Cloning a database per test costs about a third
of a second; a reset costs a few milliseconds, and ``reset`` itself is held to "leaves
nothing behind" by the model-vs-real state machine, which compares full engine state after
resets. The in-memory runs never touch a server.

The engines are fresh per test; the server sessions under them are not: a connection an
engine closes on one of these databases leaves its backend, put back by ``DISCARD ALL``,
to the next connection opened there (:mod:`tests.support.backends`), which spares each
test the 0.2-0.3 s a new backend spends loading catalogs and planning.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import attrs
import psycopg
import pytest

from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.entrypoints.routing import inmemory_control_plane, open_postgres_backend
from awa.ports.control_plane import ControlPlane
from awa.ports.storage import StorageEngine
from tests.conftest import migrate_template
from tests.support.backends import BackendRecycler
from tests.support.engines import (
    CONTRACT_BACKOFF,
    ENGINES,
    POOLED,
    EngineHandle,
    forget_control_plane,
    open_engine,
)
from tests.support.pg import DatabaseFactory
from tests.support.pgbouncer import PgBouncer


def _engine_params() -> list[object]:
    return [
        pytest.param(name, marks=[pytest.mark.postgres] if entry.needs_database else [])
        for name, entry in sorted(ENGINES.items())
    ]


@pytest.fixture(scope="session")
def backend_recycler() -> Iterator[BackendRecycler]:
    """Keeps the backends of connections closed on the contract databases for the next
    engine (see the module docstring)."""
    recycler = BackendRecycler()
    recycler.install()
    try:
        yield recycler
    finally:
        recycler.uninstall()


class ContractDatabases(dict[str, str]):
    """The contract databases by engine (or ``backend``): each one added is one whose
    backends ``recycler`` keeps."""

    def __init__(self, recycler: BackendRecycler) -> None:
        super().__init__()
        self.recycler = recycler

    def __setitem__(self, key: str, url: str) -> None:
        self.recycler.allow(url)
        super().__setitem__(key, url)


@pytest.fixture(scope="session")
def contract_databases(
    pg_databases: DatabaseFactory, backend_recycler: BackendRecycler
) -> Iterator[dict[str, str]]:
    """One migrated database per Postgres engine, created on first use."""
    urls = ContractDatabases(backend_recycler)
    try:
        yield urls
    finally:
        for url in urls.values():
            pg_databases.release(url)


@asynccontextmanager
async def contract_engine(request: pytest.FixtureRequest, name: str) -> AsyncIterator[EngineHandle]:
    """A fresh engine ``name`` on its session database, reset: what every test's
    ``engine`` is (``test_isolation`` opens a second one inside a test to check that
    nothing the first left behind reaches it)."""
    url: str | None = None
    if ENGINES[name].needs_database:
        urls: dict[str, str] = request.getfixturevalue("contract_databases")
        if name not in urls:
            factory: DatabaseFactory = request.getfixturevalue("pg_databases")
            urls[name] = factory.create(factory.template("migrated", migrate_template))
        url = urls[name]
    if name in POOLED:
        assert url is not None
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        async with open_engine(name, bouncer.url(url)) as handle:
            notifier = PostgresNotifier(url, clock=handle.clock, probe_url=bouncer.url(url))
            await handle.engine.reset()
            yield attrs.evolve(handle, notifier=notifier)
        return
    async with open_engine(name, url) as handle:
        await handle.engine.reset()
        yield handle


@pytest.fixture(params=_engine_params())
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[EngineHandle]:
    async with contract_engine(request, request.param) as handle:
        yield handle


@attrs.frozen
class BackendHandle:
    """The control plane of one backend (the stores every engine of it shares), the
    engine a client runs over that backend (to see the jobs a store enqueued) and the
    clock both read."""

    name: str
    engine: StorageEngine
    control: ControlPlane
    clock: ManualClock


#: The backends a control-plane store exists once for: the in-memory model and Postgres
#: (a database routed to queue storage, as a fresh install is).
BACKENDS = ("inmemory", "postgres")


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.postgres] if name == "postgres" else [])
        for name in BACKENDS
    ]
)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[BackendHandle]:
    """A fresh control plane per test, once per backend rather than once per engine: the
    stores are the backend's, whatever engine runs over it."""
    name: str = request.param
    clock = ManualClock()
    if name == "inmemory":
        engine = InMemoryEngine(clock, CONTRACT_BACKOFF)
        try:
            yield BackendHandle(name, engine, inmemory_control_plane(engine, clock), clock)
        finally:
            await engine.close()
        return
    urls: dict[str, str] = request.getfixturevalue("contract_databases")
    if "backend" not in urls:
        factory: DatabaseFactory = request.getfixturevalue("pg_databases")
        urls["backend"] = url = factory.create(factory.template("migrated", migrate_template))
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            assert await pg_transition.auto_finalize_if_fresh(conn)
    opened = await open_postgres_backend(
        urls["backend"], clock=clock, backoff=CONTRACT_BACKOFF, refresh_interval=0.0
    )
    try:
        await opened.engine.reset()
        await forget_control_plane(opened.control, clock)
        yield BackendHandle(name, opened.engine, opened.control, clock)
    finally:
        await opened.engine.close()
