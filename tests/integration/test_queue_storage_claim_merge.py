"""The claim's merge across lanes is exact (ADR 0006, "The claim's merge"): a claim reads
each ordered lane only as far as its rows can still rank within the batch, and the jobs it
hands out, claim after claim, come in the one global order of (aged priority, run_at, job
id), whatever the batch size and however the lanes interleave: one lane's run of rows ahead
of the others (the first walk's shares do not hold the batch, so a second walk goes on),
lanes taking turns row by row, ties on run_at, several priorities aging past each other."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from awa.adapters._pg import transition
from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.statements import KEYLESS_LANES
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import PriorityAging
from awa.ports.storage import UnitOfWork
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "merged"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
AGING = timedelta(milliseconds=40)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
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


async def _write_lanes(
    engine: QueueStorageEngine,
    clock: ManualClock,
    *,
    runs: list[tuple[int, int, int]],
) -> list[JobRecord]:
    """Each ``(producer, priority, n)`` of ``runs`` appends ``n`` jobs of ``priority``
    through producer ``producer``'s open transaction, the clock moving on 1 ms between
    runs (0 ms every fifth run: ties on run_at). The transactions stay open together, so
    each producer holds lanes of its own (one per priority)."""
    producers = 1 + max(p for p, _, _ in runs)
    written: list[JobRecord] = []
    async with AsyncExitStack() as stack:
        txs: list[UnitOfWork] = [
            await stack.enter_async_context(engine.transaction()) for _ in range(producers)
        ]
        for turn, (producer, priority, n) in enumerate(runs):
            if turn % 5:
                clock.advance(timedelta(milliseconds=1))
            specs = [
                JobSpec(kind="k", queue=QUEUE, priority=priority, args={"turn": turn, "i": i})
                for i in range(n)
            ]
            written += await engine.enqueue_many(specs, uow=txs[producer])
    return written


async def _claim_all(
    engine: QueueStorageEngine, limits: list[int], *, aging: timedelta | None
) -> list[int]:
    order: list[int] = []
    turn = 0
    while True:
        claims = await engine.claim(QUEUE, limit=limits[turn % len(limits)], aging_interval=aging)
        turn += 1
        if not claims:
            return order
        order += [c.job.id for c in claims]


def _global_order(jobs: list[JobRecord], now: datetime, aging: timedelta | None) -> list[int]:
    rule = PriorityAging(aging)
    return [
        j.id
        for j in sorted(
            jobs, key=lambda j: (rule.effective_priority(j.priority, j.run_at, now), j.run_at, j.id)
        )
    ]


async def _lanes_used(url: str) -> int:
    rows = await sql(
        url,
        "SELECT count(DISTINCT (priority, shard)) AS n FROM awa.ready_entries WHERE queue = %s",
        QUEUE,
    )
    return int(rows[0]["n"])


@pytest.mark.parametrize(
    ("limits", "run_count"),
    # one claim a job: the first 16 runs (all eight lanes, 435 rows) of the 40 (1,128 rows)
    [([32], 40), ([1], 16), ([5, 17, 3], 40), ([100], 40)],
    ids=["batch-32", "batch-1", "mixed-batches", "batch-100"],
)
async def test_runs_of_one_lane_claim_in_global_order(
    engine: QueueStorageEngine,
    clock: ManualClock,
    migrated_database_url: str,
    limits: list[int],
    run_count: int,
) -> None:
    """Eight lanes, each written in runs of 1-60 rows: the batch often comes from one
    lane's run, beyond the first walk's share of it."""
    rng = random.Random(38)
    runs = [(rng.randrange(8), 2, rng.randint(1, 60)) for _ in range(40)][:run_count]
    jobs = await _write_lanes(engine, clock, runs=runs)
    assert await _lanes_used(migrated_database_url) == 8
    clock.advance(timedelta(seconds=1))
    claimed = await _claim_all(engine, limits, aging=None)
    assert claimed == _global_order(jobs, clock.now(), None)


async def test_lanes_taking_turns_claim_in_global_order(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    """Eight lanes taking turns one row at a time: each batch takes a few rows of every
    lane."""
    runs = [(turn % 8, 2, 1) for turn in range(200)]
    jobs = await _write_lanes(engine, clock, runs=runs)
    assert await _lanes_used(migrated_database_url) == 8
    clock.advance(timedelta(seconds=1))
    claimed = await _claim_all(engine, [32, 7], aging=None)
    assert claimed == _global_order(jobs, clock.now(), None)


async def test_aged_priorities_across_lanes_claim_in_global_order(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    """Lanes of priorities 1-4 written over 300 ms and claimed with 40 ms aging at one
    instant: older rows of worse priorities rank among newer rows of better ones."""
    rng = random.Random(380)
    runs = [(rng.randrange(4), rng.randint(1, 4), rng.randint(1, 25)) for _ in range(300)]
    jobs = await _write_lanes(engine, clock, runs=runs)
    assert await _lanes_used(migrated_database_url) >= 12
    clock.advance(timedelta(milliseconds=20))
    now = clock.now()
    expected = _global_order(jobs, now, AGING)
    # Aging reorders: the global order is not the order by (priority, run_at).
    assert expected != [j.id for j in sorted(jobs, key=lambda j: (j.priority, j.run_at, j.id))]
    claimed = await _claim_all(engine, [32, 9, 50], aging=AGING)
    assert claimed == expected


async def test_a_named_lead_lane_claims_in_global_order_whether_or_not_it_is_ahead(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    """A claim's first walk reads its lead lane's whole batch and one row of every other
    lane: the merge stays exact when the lead lane is ahead, behind, or empty."""
    rng = random.Random(3838)
    runs = [(rng.randrange(8), 2, rng.randint(1, 40)) for _ in range(40)]
    jobs = await _write_lanes(engine, clock, runs=runs)
    assert await _lanes_used(migrated_database_url) == 8
    rows = await sql(
        migrated_database_url,
        "SELECT DISTINCT shard FROM awa.ready_entries WHERE queue = %s ORDER BY shard",
        QUEUE,
    )
    shards = [int(r["shard"]) for r in rows]
    clock.advance(timedelta(seconds=1))
    claims = engine._parts.claims
    order: list[int] = []
    turn = 0
    while True:
        # Every claim names a lane as its lead, in turn, right or wrong.
        claims._lead[QUEUE] = (2, shards[turn % len(shards)])
        got = await engine.claim(QUEUE, limit=[32, 5, 13][turn % 3])
        turn += 1
        if not got:
            break
        order += [c.job.id for c in got]
    assert order == _global_order(jobs, clock.now(), None)


async def test_a_full_batch_from_one_lane_names_it_the_lead(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    """The lane a whole batch came from alone leads the queue's next claim; a batch from
    several lanes names none."""
    jobs = await _write_lanes(engine, clock, runs=[(0, 2, 20), (1, 2, 20), (0, 2, 5)])
    clock.advance(timedelta(seconds=1))
    claims = engine._parts.claims
    first = await engine.claim(QUEUE, limit=10)
    assert [c.job.id for c in first] == [j.id for j in jobs[:10]]
    (shard,) = {
        int(r["shard"])
        for r in await sql(
            migrated_database_url,
            "SELECT shard FROM awa.ready_entries WHERE job_id = ANY(%s)",
            [c.job.id for c in first],
        )
    }
    assert claims._lead[QUEUE] == (2, shard)
    # 10 rows of the first lane's run and 10 of the second's: no lead.
    await engine.claim(QUEUE, limit=20)
    assert QUEUE not in claims._lead
