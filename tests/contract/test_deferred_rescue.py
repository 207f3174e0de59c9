"""Promotion of the deferred backlog and the heartbeat / deadline rescue sweeps."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import (
    QUEUE,
    SECOND,
    claim_one,
    enable_dlq,
    enqueue,
    fetch,
    rescued_as,
)
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

STALENESS = timedelta(seconds=90)


async def test_scheduled_job_is_promoted_when_due_and_not_before(engine: EngineHandle) -> None:
    run_at = engine.clock.now() + 30 * SECOND
    job = await enqueue(engine, run_at=run_at)
    engine.clock.advance(29)
    assert await engine.engine.promote_due() == 0
    assert await engine.engine.claim(QUEUE, limit=1) == []
    engine.clock.advance(1)
    assert await engine.engine.promote_due() == 1
    promoted = await fetch(engine, job.id)
    assert (promoted.state, promoted.run_at) == (JobState.Available, run_at)
    assert (await claim_one(engine)).job.id == job.id


async def test_promotion_takes_oldest_run_at_first_up_to_limit(engine: EngineHandle) -> None:
    base = engine.clock.now()
    third = await enqueue(engine, run_at=base + 3 * SECOND)
    first = await enqueue(engine, run_at=base + SECOND)
    second = await enqueue(engine, run_at=base + 2 * SECOND)
    engine.clock.advance(10)
    assert await engine.engine.promote_due(limit=2) == 2
    states = [(await fetch(engine, job.id)).state for job in (first, second, third)]
    assert states == [JobState.Available, JobState.Available, JobState.Scheduled]
    assert await engine.engine.promote_due(limit=2) == 1


async def test_promotion_wakes_the_queue(engine: EngineHandle) -> None:
    await enqueue(engine, run_at=engine.clock.now() + SECOND)
    subscription = await engine.notifier.subscribe([f"awa:{QUEUE}"])
    try:
        await subscription.wait(0.05)
        engine.clock.advance(1)
        assert await engine.engine.promote_due() == 1
        assert f"awa:{QUEUE}" in await subscription.wait(5)
    finally:
        await subscription.close()


async def test_heartbeat_keeps_an_attempt_alive(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    for _ in range(5):
        engine.clock.advance(60)
        assert await engine.engine.heartbeat([claim.lease]) == [Ack.APPLIED]
        assert await engine.engine.rescue_stale_heartbeats(staleness=STALENESS) == []
    assert (await fetch(engine, claim.job.id)).state == JobState.Running


async def test_stale_heartbeat_is_rescued_as_a_retry(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    engine.clock.advance(STALENESS)
    # Exactly at the staleness boundary the attempt is still alive.
    assert await engine.engine.rescue_stale_heartbeats(staleness=STALENESS) == []
    engine.clock.advance(1)
    now = engine.clock.now()
    rescued = await engine.engine.rescue_stale_heartbeats(staleness=STALENESS)
    assert rescued == [rescued_as(claim, JobState.Retryable, "heartbeat stale")]
    after = await fetch(engine, job.id)
    assert after.state == JobState.Retryable and after.run_at == now + 2 * SECOND
    assert [entry["error"] for entry in after.errors] == ["heartbeat stale"]
    assert after.errors[0]["attempt"] == 1


async def test_exhausted_stale_heartbeat_fails(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=1)
    claim = await claim_one(engine)
    engine.clock.advance(STALENESS + SECOND)
    rescued = await engine.engine.rescue_stale_heartbeats(staleness=STALENESS)
    assert rescued == [rescued_as(claim, JobState.Failed, "heartbeat stale")]
    failed = await fetch(engine, job.id)
    assert failed.state == JobState.Failed and failed.finalized_at == engine.clock.now()


async def test_exhausted_rescue_goes_to_dlq_when_enabled(engine: EngineHandle) -> None:
    await enable_dlq(engine)
    job = await enqueue(engine, max_attempts=1)
    await claim_one(engine)
    engine.clock.advance(STALENESS + SECOND)
    (rescued,) = await engine.engine.rescue_stale_heartbeats(staleness=STALENESS)
    assert rescued.new_state == JobState.Failed
    assert rescued.dlq_reason == "max_attempts_exhausted"
    assert await engine.engine.get_job(job.id) is None
    entry = await engine.engine.get_dlq(job.id)
    assert entry is not None and entry.reason == "max_attempts_exhausted"


async def test_rescues_are_ordered_by_job_id(engine: EngineHandle) -> None:
    for _ in range(3):
        await enqueue(engine)
    claims = await engine.engine.claim(QUEUE, limit=3)
    engine.clock.advance(STALENESS + SECOND)
    rescued = await engine.engine.rescue_stale_heartbeats(staleness=STALENESS)
    assert [r.lease for r in rescued] == sorted(claim.lease for claim in claims)


async def test_expired_deadline_is_rescued(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine, deadline=timedelta(seconds=30))
    engine.clock.advance(29)
    assert await engine.engine.rescue_expired_deadlines() == []
    engine.clock.advance(1)
    rescued = await engine.engine.rescue_expired_deadlines()
    assert rescued == [rescued_as(claim, JobState.Retryable, "deadline exceeded")]
    after = await fetch(engine, job.id)
    assert after.errors[-1]["error"] == "deadline exceeded"
    assert await engine.engine.complete([claim.lease]) == [Ack.STALE]


async def test_attempt_without_deadline_is_never_deadline_rescued(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    engine.clock.advance(timedelta(days=3))
    assert await engine.engine.rescue_expired_deadlines() == []
    assert (await fetch(engine, claim.job.id)).state == JobState.Running


async def test_exhausted_deadline_rescue_fails(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=1)
    claim = await claim_one(engine, deadline=SECOND)
    engine.clock.advance(2)
    rescued = await engine.engine.rescue_expired_deadlines()
    assert rescued == [rescued_as(claim, JobState.Failed, "deadline exceeded")]
    assert (await fetch(engine, job.id)).state == JobState.Failed
