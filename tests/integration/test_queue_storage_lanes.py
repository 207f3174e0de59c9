"""Lanes under concurrent producers (ADR 0006, "Enqueue"): producers of one queue do not
wait for each other's commit, each lane stays strictly FIFO, an ordering key keeps its
lane, the keyless lanes are bounded, and nothing is lost while producers and claimers race.

Waiting is observed through ``lock_timeout``: an insert that had to wait for another
producer's commit fails with ``lock_not_available`` instead of hanging."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta

import psycopg
import pytest

from awa.adapters._pg import transition
from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.connections import PgUnitOfWork
from awa.adapters.postgres_queue_storage.statements import KEYLESS_LANES
from awa.domain.errors import DatabaseError
from awa.domain.job import JobRecord, JobSpec
from awa.domain.partitioning import shard_for_key
from awa.domain.states import JobState
from awa.entrypoints.routing import open_postgres_routing
from awa.ports.producers import RouteChanged
from awa.ports.storage import UnitOfWork
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "lanes"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url,
        clock=clock,
        backoff=CONTRACT_BACKOFF,
        max_connections=KEYLESS_LANES + 6,
    )
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def single(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    """An engine with one pooled connection (whose prepared statements a test can read)
    on an install whose producers write to queue storage."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, max_connections=1
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _no_waiting(uow: UnitOfWork, timeout: str = "3s") -> None:
    """Make a wait for another transaction's lock fail instead of hang."""
    assert isinstance(uow, PgUnitOfWork)
    await uow.conn.execute(f"SET LOCAL lock_timeout = '{timeout}'".encode())


async def _lanes_of(url: str) -> dict[int, tuple[int, int]]:
    """job id -> (shard, lane_seq) of every ready row of the queue."""
    rows = await sql(
        url, "SELECT job_id, shard, lane_seq FROM awa.ready_entries WHERE queue = %s", QUEUE
    )
    return {r["job_id"]: (r["shard"], r["lane_seq"]) for r in rows}


async def test_open_enqueues_into_one_queue_do_not_wait_for_each_other(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    async with engine.transaction() as first, engine.transaction() as second:
        (a,) = await engine.enqueue_many([JobSpec(kind="a", queue=QUEUE)], uow=first)
        await _no_waiting(second)
        # The first transaction still holds its lane: the second takes another one.
        (b,) = await engine.enqueue_many([JobSpec(kind="b", queue=QUEUE)], uow=second)
        # The general path (unique key) takes a free lane as well.
        (c,) = await engine.enqueue_many(
            [JobSpec(kind="c", queue=QUEUE, unique_key=b"c")], uow=second
        )
    lanes = await _lanes_of(migrated_database_url)
    assert lanes[a.id][0] != lanes[b.id][0]
    assert lanes[b.id][0] == lanes[c.id][0]
    claimed = await engine.claim(QUEUE, limit=10)
    assert [claim.job.id for claim in claimed] == [a.id, b.id, c.id]


async def test_an_ordering_key_keeps_its_lane_and_waits_for_it(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    key = b"customer-7"
    async with engine.transaction() as first:
        (a,) = await engine.enqueue_many(
            [JobSpec(kind="a", queue=QUEUE, ordering_key=key)], uow=first
        )
        with pytest.raises(DatabaseError):
            async with engine.transaction() as second:
                await _no_waiting(second, "200ms")
                await engine.enqueue_many(
                    [JobSpec(kind="b", queue=QUEUE, ordering_key=key)], uow=second
                )
        # A job without a key does not wait behind the keyed lane.
        async with engine.transaction() as third:
            await _no_waiting(third)
            await engine.enqueue_many([JobSpec(kind="free", queue=QUEUE)], uow=third)
    (b,) = await engine.enqueue_many([JobSpec(kind="b", queue=QUEUE, ordering_key=key)])
    lanes = await _lanes_of(migrated_database_url)
    assert lanes[a.id][0] == lanes[b.id][0] == shard_for_key(key, 1)
    assert lanes[b.id][1] == lanes[a.id][1] + 1


async def test_keyed_jobs_use_their_shard_while_unkeyed_ones_spread(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await sql(
        migrated_database_url,
        "INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES (%s, 4)",
        QUEUE,
    )
    keys = [f"k{i}".encode() for i in range(12)]
    free = []
    async with AsyncExitStack() as stack:
        uows = [await stack.enter_async_context(engine.transaction()) for _ in range(3)]
        for uow in uows:
            await _no_waiting(uow)
            free += await engine.enqueue_many([JobSpec(kind="free", queue=QUEUE)], uow=uow)
    keyed = await engine.enqueue_many(
        [JobSpec(kind="keyed", queue=QUEUE, ordering_key=key) for key in keys]
    )
    lanes = await _lanes_of(migrated_database_url)
    for job, key in zip(keyed, keys, strict=True):
        assert lanes[job.id][0] == shard_for_key(key, 4)
    # Jobs without a key never share an ordering key's lane.
    free_lanes = {lanes[job.id][0] for job in free}
    assert len(free_lanes) == 3 and all(shard < 0 for shard in free_lanes)


async def test_a_private_schema_reads_the_shared_enqueue_shards(
    migrated_database_url: str, clock: ManualClock
) -> None:
    # ``awa.queue_meta`` is shared by every queue-storage schema (ADR 0007): an engine in
    # its own schema shards an ordering key by the queue's row there.
    await sql(
        migrated_database_url,
        "INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES (%s, 4)",
        QUEUE,
    )
    private = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, schema="qs_shards"
    )
    try:
        keys = [f"k{i}".encode() for i in range(12)]
        keyed = await private.enqueue_many(
            [JobSpec(kind="keyed", queue=QUEUE, ordering_key=key) for key in keys]
        )
    finally:
        await private.close()
    rows = await sql(
        migrated_database_url,
        "SELECT job_id, shard FROM qs_shards.ready_entries WHERE queue = %s",
        QUEUE,
    )
    shards = {r["job_id"]: r["shard"] for r in rows}
    assert {shard_for_key(key, 4) for key in keys} != {0}
    for job, key in zip(keyed, keys, strict=True):
        assert shards[job.id] == shard_for_key(key, 4)


async def test_keyless_lanes_are_bounded(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    ids: list[int] = []
    async with AsyncExitStack() as stack:
        # Every lane for jobs without an ordering key, each held by an open transaction.
        for _ in range(KEYLESS_LANES):
            uow = await stack.enter_async_context(engine.transaction())
            await _no_waiting(uow)
            (job,) = await engine.enqueue_many([JobSpec(kind="held", queue=QUEUE)], uow=uow)
            ids.append(job.id)
        # Every lane is held: one more producer waits for a lane.
        with pytest.raises(DatabaseError):
            async with engine.transaction() as extra:
                await _no_waiting(extra, "200ms")
                await engine.enqueue_many([JobSpec(kind="extra", queue=QUEUE)], uow=extra)
    lanes = await _lanes_of(migrated_database_url)
    assert {shard for shard, _ in lanes.values()} == set(range(-KEYLESS_LANES, 0))
    assert {seq for _, seq in lanes.values()} == {0}
    claimed = await engine.claim(QUEUE, limit=100)
    assert [claim.job.id for claim in claimed] == ids
    # A later producer reuses the lanes instead of opening more.
    await engine.enqueue_many([JobSpec(kind="later", queue=QUEUE) for _ in range(3)])
    rows = await sql(
        migrated_database_url, "SELECT count(*) AS n FROM awa.lanes WHERE queue = %s", QUEUE
    )
    assert rows[0]["n"] == KEYLESS_LANES


async def test_concurrent_producers_and_claimers_lose_nothing_and_keep_each_lane_fifo(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    """The producers share one stopped clock, so a batch that gets its lane after a later
    one is stamped a microsecond after it (lane_stamp): a claimer that finds nothing
    moves the clock on."""
    producers, per_producer = 6, 25
    inserted: list[int] = []
    claimed: list[int] = []
    done = asyncio.Event()

    async def produce(n: int) -> None:
        for i in range(per_producer):
            spec = JobSpec(kind="p", queue=QUEUE, args={"p": n, "i": i})
            if i % 3 == 0:
                # a batch and a caller transaction as well as single inserts
                async with engine.transaction() as uow:
                    jobs = await engine.enqueue_many([spec, spec], uow=uow)
            else:
                jobs = await engine.enqueue_many([spec])
            inserted.extend(job.id for job in jobs)

    async def claim() -> None:
        while True:
            got = await engine.claim(QUEUE, limit=7)
            claimed.extend(c.job.id for c in got)
            if got:
                await engine.complete([c.lease for c in got])
            elif done.is_set() and not await _due_later(migrated_database_url, clock):
                return
            else:
                clock.advance(timedelta(milliseconds=1))
                await asyncio.sleep(0.005)

    claimers = [asyncio.create_task(claim()) for _ in range(2)]
    await asyncio.gather(*(produce(n) for n in range(producers)))
    done.set()
    await asyncio.gather(*claimers)
    assert len(inserted) == producers * (per_producer + (per_producer + 2) // 3)
    assert sorted(claimed) == sorted(inserted)

    # Every lane holds contiguous positions, in the order of its jobs' ids.
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for job_id, (shard, seq) in (await _lanes_of(migrated_database_url)).items():
        by_lane.setdefault(shard, []).append((seq, job_id))
    for rows in by_lane.values():
        rows.sort()
        assert [seq for seq, _ in rows] == list(range(len(rows)))
    assert 1 <= len(by_lane) <= KEYLESS_LANES


async def test_one_claimer_takes_jobs_of_every_lane_in_fifo_order(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    order: list[int] = []
    async with AsyncExitStack() as stack:
        uows = [await stack.enter_async_context(engine.transaction()) for _ in range(3)]
        for round_ in range(4):
            for uow in uows:
                (job,) = await engine.enqueue_many(
                    [JobSpec(kind="x", queue=QUEUE, args={"r": round_})], uow=uow
                )
                order.append(job.id)
    assert len({shard for shard, _ in (await _lanes_of(migrated_database_url)).values()}) == 3
    seen: list[int] = []
    while got := await engine.claim(QUEUE, limit=5):
        seen.extend(c.job.id for c in got)
    assert seen == order


async def test_sql_producers_of_one_queue_do_not_wait_for_each_other(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    first = await psycopg.AsyncConnection.connect(migrated_database_url)
    second = await psycopg.AsyncConnection.connect(migrated_database_url)
    try:
        await first.execute("SELECT awa.insert_job_compat('a', %s)", (QUEUE,))
        await second.execute("SET LOCAL lock_timeout = '3s'")
        await second.execute("SELECT awa.insert_job_compat('b', %s)", (QUEUE,))
        # An ordering key still goes to its own lane.
        await second.execute(
            "SELECT awa.insert_job_compat('c', %s, p_ordering_key => 'k'::bytea)", (QUEUE,)
        )
        await second.commit()
        await first.commit()
    finally:
        await first.close()
        await second.close()
    rows = await sql(
        migrated_database_url,
        "SELECT kind, shard FROM awa.ready_entries WHERE queue = %s ORDER BY job_id",
        QUEUE,
    )
    shards = {r["kind"]: r["shard"] for r in rows}
    assert shards["a"] != shards["b"] and shards["c"] == shard_for_key(b"k", 1)
    assert [c.job.kind for c in await engine.claim(QUEUE, limit=10)] == ["a", "b", "c"]


async def test_a_remembered_route_that_changed_inserts_nothing(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    elsewhere = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, schema="elsewhere"
    )
    try:
        # Producers write to canonical storage: nothing may land in "elsewhere".
        with pytest.raises(RouteChanged) as raised:
            await elsewhere.enqueue_many_routed([JobSpec(kind="lost", queue=QUEUE)])
    finally:
        await elsewhere.close()
    assert raised.value.supported
    assert await sql(migrated_database_url, "SELECT 1 FROM elsewhere.ready_entries") == []
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    (job,) = await engine.enqueue_many_routed([JobSpec(kind="kept", queue=QUEUE)])
    assert [c.job.id for c in await engine.claim(QUEUE, limit=10)] == [job.id]


async def test_the_router_inserts_through_the_remembered_route(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    router = await open_postgres_routing(migrated_database_url)
    try:
        first = await router.enqueue_many([JobSpec(kind="a", queue=QUEUE)])
        rest = await router.enqueue_many([JobSpec(kind="b", queue=QUEUE) for _ in range(3)])
    finally:
        await router.close()
    claimed = await engine.claim(QUEUE, limit=10)
    assert [c.job.id for c in claimed] == [job.id for job in (*first, *rest)]


async def test_wake_ups_after_commit_reach_listeners_and_leave_the_session_alone(
    migrated_database_url: str, clock: ManualClock
) -> None:
    """Concurrent enqueues leave their wake-ups to one statement sent after commit, whose
    non-durable commit setting is its own: the pooled connection keeps its settings."""
    engine = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, max_connections=1
    )
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as listener:
        await listener.execute('LISTEN "awa:wake_a"')
        await listener.execute('LISTEN "awa:wake_b"')
        try:
            async with engine._pool.connection() as conn:
                before = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            engine._parts.wakes.after_commit({"awa:wake_a", "awa:wake_b"})
            await engine._parts.wakes.drain()
            heard: set[str] = set()
            async with asyncio.timeout(10):
                async for note in listener.notifies():
                    heard.add(note.channel)
                    if len(heard) == 2:
                        break
            assert heard == {"awa:wake_a", "awa:wake_b"}
            async with engine._pool.connection() as conn:
                after = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            assert after == before
        finally:
            await engine.close()


async def test_the_one_statement_inserts_settle_on_the_generic_plan(
    engine: QueueStorageEngine, single: QueueStorageEngine
) -> None:
    """The remembered-route inserts are autocommit statements with no plan setting of their
    own: the server must pick the prepared generic plan by itself (planning the batch
    statement costs several times running it), which it does only while no estimate
    depends on a parameter's value. Single plain jobs take enqueue_one_routed and batches
    enqueue_plain_routed, after the first insert, which finds no counter bucket or lane
    yet and runs enqueue_ready_routed."""
    for n in range(10):
        await single.enqueue_many_routed([JobSpec(kind="one", queue=QUEUE, args={"n": n})])
        await single.enqueue_many_routed([JobSpec(kind="two", queue=QUEUE) for _ in range(2)])
    async with single._pool.connection() as conn:
        cur = await conn.execute(
            "SELECT CASE WHEN statement LIKE '%%The common insert()%%' THEN 'one' "
            "WHEN statement LIKE '%%for a batch of such jobs%%' THEN 'plain' "
            "ELSE 'ready' END AS name, generic_plans, custom_plans "
            "FROM pg_prepared_statements "
            "WHERE statement LIKE '%%queue_storage_route_check%%'"
        )
        plans = {row["name"]: row for row in await cur.fetchall()}
    assert set(plans) == {"one", "plain", "ready"}
    for name in ("one", "plain"):
        assert plans[name]["generic_plans"] >= 4, plans
    runs = {name: row["generic_plans"] + row["custom_plans"] for name, row in plans.items()}
    # the first single insert fell back to enqueue_ready_routed, which made the lane
    assert runs == {"one": 10, "plain": 10, "ready": 1}, plans
    assert len(await engine.claim(QUEUE, limit=100)) == 30


async def _due_later(url: str, clock: ManualClock) -> bool:
    """Whether a ready row of the queue is stamped after the clock."""
    rows = await sql(
        url,
        "SELECT count(*) AS n FROM awa.ready_entries WHERE queue = %s AND run_at > %s",
        QUEUE,
        clock.now(),
    )
    return bool(rows[0]["n"])


async def test_routed_single_inserts_racing_claimers_lose_nothing_and_keep_lanes_fifo(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    """insert()'s path: single plain jobs take the one-job statement (a free counter
    bucket and a free existing lane, else the full statement), batches the full one, all
    behind the remembered route, while claimers drain the queue. The producers share one
    stopped clock, so a job that gets its lane after a later one is stamped a microsecond
    after it (lane_stamp): a claimer that finds nothing moves the clock on."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    producers, per_producer = 8, 30
    inserted: list[int] = []
    claimed: list[int] = []
    done = asyncio.Event()

    async def produce(n: int) -> None:
        for i in range(per_producer):
            spec = JobSpec(kind="r", queue=QUEUE, args={"p": n, "i": i}, priority=1 + i % 2)
            batch = [spec, spec] if i % 5 == 0 else [spec]
            jobs = await engine.enqueue_many_routed(batch)
            inserted.extend(job.id for job in jobs)

    async def claim() -> None:
        while True:
            got = await engine.claim(QUEUE, limit=7)
            claimed.extend(c.job.id for c in got)
            if got:
                await engine.complete([c.lease for c in got])
            elif done.is_set() and not await _due_later(migrated_database_url, clock):
                return
            else:
                clock.advance(timedelta(milliseconds=1))
                await asyncio.sleep(0.005)

    claimers = [asyncio.create_task(claim()) for _ in range(2)]
    await asyncio.gather(*(produce(n) for n in range(producers)))
    done.set()
    await asyncio.gather(*claimers)
    assert len(inserted) == producers * (per_producer + per_producer // 5)
    assert sorted(claimed) == sorted(inserted)
    lanes: dict[tuple[int, int], list[int]] = {}
    for row in await sql(
        migrated_database_url,
        "SELECT priority, shard, lane_seq FROM awa.ready_entries WHERE queue = %s",
        QUEUE,
    ):
        lanes.setdefault((row["priority"], row["shard"]), []).append(row["lane_seq"])
    for positions in lanes.values():
        assert sorted(positions) == list(range(len(positions)))
    counts = next(c for c in await engine.queue_counts() if c.queue == QUEUE)
    assert counts.count(JobState.Available) == 0
    assert counts.completed_last_hour == len(inserted)


async def test_concurrent_single_inserts_commit_together(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Group commit for concurrent producers: single inserts that arrive while another
    enqueue is in flight are written by one statement in one transaction (one WAL flush
    for all of them); each caller gets back its own job."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    await engine.enqueue_many_routed([JobSpec(kind="warm", queue=QUEUE)])
    records = await asyncio.gather(
        *(
            engine.enqueue_many_routed([JobSpec(kind=f"c{n}", queue=QUEUE, args={"n": n})])
            for n in range(8)
        )
    )
    rows = await sql(
        migrated_database_url,
        "SELECT job_id, kind, xmin::text AS tx FROM awa.ready_entries "
        "WHERE queue = %s AND kind <> 'warm'",
        QUEUE,
    )
    assert {r["job_id"]: r["kind"] for r in rows} == {
        job.id: f"c{n}" for n, (job,) in enumerate(records)
    }
    assert [job.args for (job,) in records] == [{"n": n} for n in range(8)]
    assert len({r["tx"] for r in rows}) <= 2  # the first on its own, the others together
    claimed = await engine.claim(QUEUE, limit=20)
    assert sorted(c.job.kind for c in claimed) == sorted(["warm", *(f"c{n}" for n in range(8))])


async def _prepared_runs(engine: QueueStorageEngine, marker: str) -> int:
    """How many times the engine's one pooled connection ran the prepared statement whose
    text holds ``marker``."""
    async with engine._pool.connection() as conn:
        cur = await conn.execute(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0) AS n "
            "FROM pg_prepared_statements WHERE statement LIKE %s",
            (f"%{marker}%",),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


#: Comment lines of enqueue_plain_routed's and enqueue_ready_routed's texts.
PLAIN_BATCH = "enqueue_one_routed for a batch of such jobs"
READY_BATCH = "enqueue_ready as one statement on its own"


async def test_a_batch_of_plain_jobs_takes_its_lanes_in_id_order_in_one_statement(
    single: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A batch of plain jobs over two queues and two priorities, once their lanes and
    counter buckets exist: one run of enqueue_plain_routed writes it, ids in input order,
    each (queue, priority)'s jobs at consecutive places of one lane in id order, counted
    once each."""
    other = f"{QUEUE}-b"
    # the lanes and buckets of both queues and priorities
    await single.enqueue_many_routed(
        [JobSpec(kind="first", queue=q, priority=p) for q in (QUEUE, other) for p in (1, 2)]
    )
    assert await _prepared_runs(single, PLAIN_BATCH) == 1  # found no lane: fell back
    specs = [
        JobSpec(kind="b", queue=(QUEUE, other)[n % 2], priority=1 + n // 2 % 2, args={"n": n})
        for n in range(12)
    ]
    records = await single.enqueue_many_routed(specs)
    assert await _prepared_runs(single, PLAIN_BATCH) == 2
    assert await _prepared_runs(single, READY_BATCH) == 1
    assert [r.args for r in records] == [{"n": n} for n in range(12)]
    assert [r.id for r in records] == sorted(r.id for r in records)
    rows = await sql(
        migrated_database_url,
        "SELECT job_id, queue, priority, shard, lane_seq FROM awa.ready_entries "
        "WHERE kind = 'b' ORDER BY job_id",
    )
    assert [r["job_id"] for r in rows] == [r.id for r in records]
    lanes: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in rows:
        lanes.setdefault((r["queue"], r["priority"]), []).append((r["shard"], r["lane_seq"]))
    assert len(lanes) == 4
    for places in lanes.values():
        assert len({shard for shard, _ in places}) == 1  # one lane each
        seqs = [seq for _, seq in places]
        assert seqs == list(range(seqs[0], seqs[0] + 3))  # consecutive, in id order
    # each lane goes on right after its first job's place
    firsts = await sql(
        migrated_database_url,
        "SELECT queue, priority, shard, lane_seq FROM awa.ready_entries WHERE kind = 'first'",
    )
    assert {(r["queue"], r["priority"]): (r["shard"], r["lane_seq"] + 1) for r in firsts} == {
        key: places[0] for key, places in lanes.items()
    }
    counts = await sql(
        migrated_database_url,
        "SELECT queue, sum(n)::int AS n FROM awa.queue_counts WHERE state = 'available' "
        "GROUP BY queue ORDER BY queue",
    )
    assert {r["queue"]: r["n"] for r in counts} == {QUEUE: 8, other: 8}


async def test_a_plain_batch_whose_lane_is_held_falls_back_and_writes_each_job_once(
    single: QueueStorageEngine, migrated_database_url: str
) -> None:
    """When another open transaction holds the only lane of one (queue, priority) of the
    batch, enqueue_plain_routed writes nothing (no id drawn, no counter moved) and
    enqueue_ready_routed writes the whole batch, in a new lane for that one."""
    await single.enqueue_many_routed(
        [JobSpec(kind="first", queue=QUEUE, priority=p) for p in (1, 2)]
    )
    first_ids = await sql(migrated_database_url, "SELECT last_value FROM awa.jobs_id_seq")
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as holder:
        await holder.execute(
            "SELECT 1 FROM awa.lanes WHERE queue = %s AND priority = 2 FOR UPDATE", (QUEUE,)
        )
        records = await single.enqueue_many_routed(
            [JobSpec(kind="b", queue=QUEUE, priority=1 + n % 2, args={"n": n}) for n in range(6)]
        )
        await holder.rollback()
    # the first batch found no lanes; this one found one held
    assert await _prepared_runs(single, PLAIN_BATCH) == 2
    assert await _prepared_runs(single, READY_BATCH) == 2
    # the ids the batch got follow the first jobs' at once: the plain statement drew none
    assert [r.id for r in records] == [first_ids[0]["last_value"] + 1 + n for n in range(6)]
    rows = await sql(
        migrated_database_url,
        "SELECT job_id, priority, shard FROM awa.ready_entries WHERE kind = 'b' ORDER BY job_id",
    )
    assert [r["job_id"] for r in rows] == [r.id for r in records]
    shards = {p: {r["shard"] for r in rows if r["priority"] == p} for p in (1, 2)}
    assert len(shards[2]) == 1 and len(shards[1]) == 1
    held = await sql(
        migrated_database_url,
        "SELECT shard FROM awa.lanes WHERE queue = %s AND priority = 2",
        QUEUE,
    )
    assert len(held) == 2  # the held one and the new one the batch went to
    counts = await sql(
        migrated_database_url,
        "SELECT sum(n)::int AS n FROM awa.queue_counts WHERE queue = %s AND state = 'available'",
        QUEUE,
    )
    assert counts[0]["n"] == 8


async def test_an_insert_batch_that_fails_fails_every_insert_in_it(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    """The inserts written together share their fate: when the route changed, every
    caller gets RouteChanged and none of their jobs is written."""
    elsewhere = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, schema="elsewhere"
    )
    try:
        results = await asyncio.gather(
            *(
                elsewhere.enqueue_many_routed([JobSpec(kind=f"lost{n}", queue=QUEUE)])
                for n in range(6)
            ),
            return_exceptions=True,
        )
        assert elsewhere._parts.group.pending == []
    finally:
        await elsewhere.close()
    assert all(isinstance(result, RouteChanged) for result in results), results
    assert await sql(migrated_database_url, "SELECT 1 FROM elsewhere.ready_entries") == []


async def test_an_insert_cancelled_before_its_batch_went_out_is_not_written(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    tasks = [
        asyncio.create_task(engine.enqueue_many_routed([JobSpec(kind=kind, queue=QUEUE)]))
        for kind in ("direct", "batched", "given-up")
    ]
    await asyncio.sleep(0)  # the first is in flight, the other two wait for the batch
    assert [spec.kind for spec, _ in engine._parts.group.pending] == ["batched", "given-up"]
    tasks[2].cancel()
    (direct,), (batched,) = await asyncio.gather(*tasks[:2])
    with pytest.raises(asyncio.CancelledError):
        await tasks[2]
    rows = await sql(
        migrated_database_url, "SELECT job_id, kind FROM awa.ready_entries WHERE queue = %s", QUEUE
    )
    assert {r["kind"]: r["job_id"] for r in rows} == {"direct": direct.id, "batched": batched.id}


GATE_KEY = 4711


async def _held_at_the_gate(url: str) -> int:
    rows = await sql(
        url,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'",
    )
    return int(rows[0]["n"])


async def _at_least_held(url: str, n: int) -> bool:
    return await _held_at_the_gate(url) >= n


async def test_over_a_slow_link_an_insert_commits_beside_a_batch_held_open(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    """Several batches on the wire (ADR 0040): once the engine's writes take longer than
    an insert waits for one (here a write held 50 ms of the clock), an insert that meets a
    batch on the wire goes beside it and commits while that batch is still held open. The
    gate: jobs of kind ``gated`` wait, in the insert's transaction, for an advisory lock
    the test holds."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
        await conn.execute(
            "CREATE FUNCTION public.awa_test_gate() RETURNS trigger LANGUAGE plpgsql AS $f$"
            f" BEGIN PERFORM pg_advisory_xact_lock_shared({GATE_KEY}); RETURN NEW; END $f$;"
            "CREATE TRIGGER awa_test_gate BEFORE INSERT ON awa.ready_entries FOR EACH ROW"
            " WHEN (NEW.kind = 'gated') EXECUTE FUNCTION public.awa_test_gate()"
        )
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as gate:

        async def held(kind: str) -> asyncio.Task[list[JobRecord]]:
            before = await _held_at_the_gate(migrated_database_url)
            task = asyncio.create_task(
                engine.enqueue_many_routed([JobSpec(kind=kind, queue=QUEUE)])
            )
            await until(
                lambda: _at_least_held(migrated_database_url, before + 1),
                f"{kind} waits at the gate",
            )
            return task

        # The engine's first write takes 50 ms: it learns that its link is slow.
        await gate.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))
        probe = await held("gated")
        clock.advance(0.05)
        await gate.execute("SELECT pg_advisory_unlock(%s)", (GATE_KEY,))
        await probe
        # A lone insert and a batch beside it, both held at the gate.
        await gate.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))
        lone = await held("gated")
        batch = await held("gated")
        free = asyncio.create_task(engine.enqueue_many_routed([JobSpec(kind="free", queue=QUEUE)]))
        (job,) = await until(lambda: free.result() if free.done() else None, "free commits")
        assert not lone.done() and not batch.done()
        rows = await sql(
            migrated_database_url,
            "SELECT job_id, kind FROM awa.ready_entries WHERE queue = %s",
            QUEUE,
        )
        assert sorted((r["kind"], r["job_id"]) for r in rows) == sorted(
            [("gated", probe.result()[0].id), ("free", job.id)]
        )
        await gate.execute("SELECT pg_advisory_unlock(%s)", (GATE_KEY,))
        (first,), (second,) = await asyncio.gather(lone, batch)
    rows = await sql(
        migrated_database_url,
        "SELECT job_id FROM awa.ready_entries WHERE queue = %s AND kind = 'gated'",
        QUEUE,
    )
    assert {r["job_id"] for r in rows} == {probe.result()[0].id, first.id, second.id}
