"""Enqueue snapshots, claim ordering (FIFO, priority, aging) and concurrent claimers."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from awa.domain.states import DEFAULT_UNIQUE_STATES, JobState
from tests.contract._support import QUEUE, SECOND, claim_ids, claim_one, enqueue, enqueue_n, fetch
from tests.contract._support import spec as make_spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def test_enqueue_returns_available_snapshot(engine: EngineHandle) -> None:
    now = engine.clock.now()
    job = await enqueue(engine, args={"n": 1}, tags=("a",), metadata={"m": 1}, max_attempts=7)
    assert job.state == JobState.Available
    assert (job.kind, job.queue, job.args, job.priority) == ("contract_job", QUEUE, {"n": 1}, 2)
    assert (job.attempt, job.max_attempts, job.run_lease) == (0, 7, 0)
    assert job.run_at == now and job.created_at == now
    assert job.tags == ("a",) and job.metadata == {"m": 1}
    assert job.errors == () and job.progress is None
    assert job.heartbeat_at is None and job.deadline_at is None
    assert job.attempted_at is None and job.finalized_at is None
    assert await fetch(engine, job.id) == job


async def test_ids_increase_in_input_order(engine: EngineHandle) -> None:
    first = await enqueue_n(engine, 5)
    second = await enqueue_n(engine, 3)
    ids = [job.id for job in first + second]
    assert ids == sorted(ids) and len(set(ids)) == 8
    assert [job.kind for job in first] == [f"job_{index}" for index in range(5)]


async def test_explicit_run_at_starts_scheduled_even_in_the_past(engine: EngineHandle) -> None:
    past = engine.clock.now() - timedelta(minutes=5)
    future = engine.clock.now() + timedelta(minutes=5)
    old = await enqueue(engine, run_at=past)
    later = await enqueue(engine, run_at=future)
    assert (old.state, old.run_at) == (JobState.Scheduled, past)
    assert (later.state, later.run_at) == (JobState.Scheduled, future)
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_unique_states_default_is_stored(engine: EngineHandle) -> None:
    job = await enqueue(engine, unique_key=b"k" * 16)
    assert job.unique_states == DEFAULT_UNIQUE_STATES
    custom = await enqueue(engine, unique_key=b"j" * 16, unique_states=0b0000_0011)
    assert custom.unique_states == 0b0000_0011


async def test_claim_sets_attempt_lease_and_timestamps(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    engine.clock.advance(3)
    now = engine.clock.now()
    claim = await claim_one(engine, deadline=timedelta(seconds=30))
    assert claim.job.id == job.id and claim.lease == claim.job.lease
    assert claim.lease.lease == 1 and claim.job.attempt == 1
    assert claim.job.state == JobState.Running
    assert claim.job.attempted_at == now and claim.job.heartbeat_at == now
    assert claim.deadline_at == now + timedelta(seconds=30) == claim.job.deadline_at
    assert await fetch(engine, job.id) == claim.job


async def test_claim_without_deadline_has_none(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    assert claim.deadline_at is None and claim.job.deadline_at is None


async def test_claim_limit_and_non_positive_limit(engine: EngineHandle) -> None:
    await enqueue_n(engine, 5)
    assert await engine.engine.claim(QUEUE, limit=0) == []
    assert await engine.engine.claim(QUEUE, limit=-1) == []
    assert len(await engine.engine.claim(QUEUE, limit=3)) == 3
    assert len(await engine.engine.claim(QUEUE, limit=10)) == 2
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_fifo_within_a_lane(engine: EngineHandle) -> None:
    jobs = await enqueue_n(engine, 10)
    claimed = [(await claim_one(engine)).job.id for _ in range(4)]
    claimed += await claim_ids(engine)
    assert claimed == [job.id for job in jobs]


async def test_claim_only_takes_its_queue(engine: EngineHandle) -> None:
    mine = await enqueue(engine)
    await enqueue(engine, queue="elsewhere")
    assert await claim_ids(engine) == [mine.id]


async def test_lower_priority_number_first(engine: EngineHandle) -> None:
    low = await enqueue(engine, priority=4)
    mid = await enqueue(engine, priority=2)
    high = await enqueue(engine, priority=1)
    also_mid = await enqueue(engine, priority=2)
    assert await claim_ids(engine) == [high.id, mid.id, also_mid.id, low.id]


async def test_earlier_run_at_wins_within_a_priority(engine: EngineHandle) -> None:
    late = await enqueue(engine, run_at=engine.clock.now() + 2 * SECOND)
    early = await enqueue(engine, run_at=engine.clock.now() + SECOND)
    engine.clock.advance(5)
    assert await engine.engine.promote_due() == 2
    assert await claim_ids(engine) == [early.id, late.id]


async def test_aging_lets_a_waiting_job_beat_a_fresh_one(engine: EngineHandle) -> None:
    interval = timedelta(seconds=60)
    old = await enqueue(engine, priority=4)
    engine.clock.advance(3 * interval)
    fresh = await enqueue(engine, priority=2)
    ids = [c.job.id for c in await engine.engine.claim(QUEUE, limit=2, aging_interval=interval)]
    assert ids == [old.id, fresh.id]


async def test_without_aging_priority_is_strict(engine: EngineHandle) -> None:
    old = await enqueue(engine, priority=4)
    engine.clock.advance(timedelta(hours=1))
    fresh = await enqueue(engine, priority=2)
    assert await claim_ids(engine) == [fresh.id, old.id]


async def test_aging_ties_fall_back_to_run_at(engine: EngineHandle) -> None:
    interval = timedelta(seconds=10)
    p3 = await enqueue(engine, priority=3)
    engine.clock.advance(interval)
    p2 = await enqueue(engine, priority=2)
    # The p3 job aged to 2 and has the earlier run_at, so it goes first.
    ids = [c.job.id for c in await engine.engine.claim(QUEUE, limit=2, aging_interval=interval)]
    assert ids == [p3.id, p2.id]


async def test_concurrent_claimers_never_share_a_job(engine: EngineHandle) -> None:
    jobs = await engine.engine.enqueue_many([make_spec(args={"n": n}) for n in range(500)])
    seen: list[int] = []

    async def claimer() -> None:
        while True:
            claims = await engine.engine.claim(QUEUE, limit=7)
            if not claims:
                return
            seen.extend(claim.job.id for claim in claims)
            await engine.engine.complete([claim.lease for claim in claims])

    await asyncio.gather(*(claimer() for _ in range(8)))
    assert sorted(seen) == [job.id for job in jobs]
    assert len(seen) == len(set(seen))
