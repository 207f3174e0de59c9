"""A producer's connections come with the common insert planned.

A new backend's first run of ``enqueue_one_routed`` loaded the catalog and planned the
statement (6-9 ms on the test host), and the server made custom plans for its next four
(1-2 ms each, against 0.5 ms under the generic plan): every connection a producer's pool
opened put a handful of slow inserts on its callers' path, the first ones of a process
and each one the pool grew by. A new connection of the engine's pool is now prepared
before the pool lends it out, and a connection opened before the engine was built (the
pool's first) ahead of the routing engine's first insert straight to the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from awa.adapters._pg.pool import DictConnection, add_warmer, open_pool, remove_warmer
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.enqueue import WARM_RUNS
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.entrypoints import bootstrap
from awa.entrypoints.routing import open_routing_pool, postgres_routing
from tests.support.queue_storage import prepared_plans
from tests.support.wire import WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: The schema producers write to on a fresh install: the warm-up's route check passes.
SCHEMA = "awa"
QUEUE = "warm"
#: A comment line of enqueue_one_routed's text.
COMMON_INSERT = "The common insert() (one available job"
#: A comment line of enqueue_plain_routed's text (a batch of inserts that met on the wire).
PLAIN_BATCH_INSERT = "enqueue_one_routed for a batch of such jobs"
#: A comment line of enqueue_ready_routed's text (such a batch when a lane or bucket is
#: missing or held).
BATCH_INSERT = "enqueue_ready as one statement on its own"


@pytest.fixture
async def active_url(migrated_database_url: str) -> str:
    """A database whose producers write to queue storage in ``awa`` (a fresh install)."""
    url = migrated_database_url
    await bootstrap.install_queue_storage(
        url, SCHEMA, queue_slot_count=16, lease_slot_count=8, reset=False
    )
    await bootstrap.activate_queue_storage_if_fresh(url, SCHEMA)
    return url


@pytest.fixture
async def engine(active_url: str) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        active_url,
        clock=SystemClock(),
        backoff=Backoff(),
        schema=SCHEMA,
        max_connections=2,
    )
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_connection_the_pool_opens_comes_with_the_insert_planned(
    engine: QueueStorageEngine,
) -> None:
    # The queue's counter bucket and lane exist once it had a job.
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    async with engine._pool.connection() as first:
        # The pool's first connection was opened before the engine was built.
        assert (await prepared_plans(first, COMMON_INSERT))[:2] == (0, 0)
        async with engine._pool.connection() as second:
            warmed = await prepared_plans(second, COMMON_INSERT)
            backend = second.info.backend_pid
            plain = await prepared_plans(second, PLAIN_BATCH_INSERT)
            batch = await prepared_plans(second, BATCH_INSERT)
        # Custom plans for its first runs, then the generic plan: all three statements.
        assert warmed == (1, WARM_RUNS - 1, "auto")
        assert plain == (1, WARM_RUNS - 1, "auto")
        assert batch == (1, WARM_RUNS - 1, "auto")
        # The first connection is busy: the insert runs on the warmed one, generically.
        [record] = await engine.enqueue_many_routed([JobSpec(kind="k", queue=QUEUE)])
        async with engine._pool.connection() as again:
            assert again.info.backend_pid == backend
            after = await prepared_plans(again, COMMON_INSERT)
    assert after == (2, WARM_RUNS - 1, "auto")
    assert (await engine.get_job(record.id)) is not None


async def test_the_warm_up_writes_nothing_and_wakes_no_one(
    engine: QueueStorageEngine, active_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(active_url, autocommit=True) as listener:
        # The warm-up's job names the empty queue, whose channel is this one.
        await listener.execute('LISTEN "awa:"')
        async with engine._pool.connection() as conn:
            await engine._parts.enqueue.warm(conn)
            assert (await prepared_plans(conn, COMMON_INSERT))[:2] == (1, WARM_RUNS - 1)
            await conn.execute("SELECT pg_notify('awa:', 'after the warm-up')")
        # Notifications of one session arrive in commit order: the marker comes first.
        async for note in listener.notifies():
            assert note.payload == "after the warm-up"
            break
        for table in ("ready_entries", "queue_counts", "lanes"):
            cur = await listener.execute(f"SELECT count(*) FROM {SCHEMA}.{table}")
            assert await cur.fetchone() == (0,), table
    cur_jobs = await engine.queue_counts()
    assert cur_jobs == []


async def test_warming_a_connection_is_one_round_trip(active_url: str) -> None:
    """Over a slow link each round trip of the warm-up holds a new connection back from
    the producers: all its runs go in one pipeline."""
    async with WireCounter(active_url) as wire:
        engine = await QueueStorageEngine.open(
            wire.url(), clock=SystemClock(), backoff=Backoff(), schema=SCHEMA, max_connections=2
        )
        try:
            async with engine._pool.connection() as conn:
                mark = wire.mark()
                await engine._parts.enqueue.warm(conn)
                bursts = [b for b in wire.since(mark) if wire.link(b).named or b.executes]
                warmed = await prepared_plans(conn, COMMON_INSERT)
        finally:
            await engine.close()
    assert len(bursts) == 1, [b.kinds() for b in bursts]
    # the common insert, and both statements of a batch that met on the wire
    assert bursts[0].executes == 3 * WARM_RUNS
    assert warmed == (1, WARM_RUNS - 1, "auto")


async def test_the_first_routed_inserts_of_a_process_run_under_the_generic_plan(
    active_url: str,
) -> None:
    """The routing engine's first insert straight to the queue storage it read as the
    route has that engine warm a pooled connection first, so the inserts after it are
    not planned one by one."""
    pool = await open_routing_pool(active_url, max_connections=1)
    routing = postgres_routing(pool, active_url, owns_pool=True)
    try:
        for n in range(4):
            await routing.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={"n": n})])
        async with pool.connection() as conn:
            generic, custom, _mode = await prepared_plans(conn, COMMON_INSERT)
    finally:
        await routing.close()
    # The warm-up's plans, then the three inserts after the first, each generic.
    assert custom == WARM_RUNS - 1
    assert generic == 1 + 3


async def test_a_warmer_that_fails_leaves_the_connection_usable_and_can_be_removed(
    migrated_database_url: str,
) -> None:
    pool = await open_pool(migrated_database_url, max_connections=3)
    ran: list[int] = []

    async def failing(conn: DictConnection) -> None:
        ran.append(conn.info.backend_pid)
        await conn.execute("SELECT 1 / 0")

    try:
        add_warmer(pool, failing)
        async with pool.connection() as first, pool.connection() as second:
            assert ran == [second.info.backend_pid]
            cur = await second.execute("SELECT 2 AS n")
            assert await cur.fetchone() == {"n": 2}
            remove_warmer(pool, failing)
            async with pool.connection() as third:
                assert third.info.backend_pid not in (first.info.backend_pid, *ran)
        assert len(ran) == 1
    finally:
        await pool.close()
