"""Attempt outcomes: complete, retry, snooze, cancel, fail, release, heartbeat, progress."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.lifecycle import error_entry
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, SECOND, claim_one, enqueue, fetch
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def test_complete_finalizes_and_keeps_attempt_times(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine, deadline=timedelta(minutes=1))
    engine.clock.advance(2)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    done = await fetch(engine, job.id)
    assert done.state == JobState.Completed
    assert done.finalized_at == engine.clock.now()
    assert done.heartbeat_at == claim.job.heartbeat_at
    assert done.deadline_at == claim.deadline_at
    assert (done.attempt, done.run_lease, done.errors) == (1, 1, ())


async def test_complete_batch_reports_each_lease_in_order(engine: EngineHandle) -> None:
    await enqueue(engine)
    await enqueue(engine)
    first, second = await engine.engine.claim(QUEUE, limit=2)
    acks = await engine.engine.complete([second.lease, first.lease, second.lease])
    assert acks == [Ack.APPLIED, Ack.APPLIED, Ack.STALE]


async def test_retry_uses_backoff_and_counts_attempts(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=5)
    for attempt in (1, 2, 3):
        claim = await claim_one(engine)
        assert claim.job.attempt == attempt and claim.lease.lease == attempt
        now = engine.clock.now()
        assert await engine.engine.retry(claim.lease, error=f"e{attempt}") == Ack.APPLIED
        retried = await fetch(engine, job.id)
        assert retried.state == JobState.Retryable
        assert retried.run_at == now + timedelta(seconds=2**attempt)
        assert retried.errors[-1] == error_entry(f"e{attempt}", attempt=attempt, at=now)
        engine.clock.advance(2**attempt)
        assert await engine.engine.promote_due() == 1
    assert len((await fetch(engine, job.id)).errors) == 3


async def test_retry_after_uses_the_given_delay(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    now = engine.clock.now()
    await engine.engine.retry(claim.lease, error="later", delay=timedelta(seconds=42))
    retried = await fetch(engine, job.id)
    assert (retried.state, retried.run_at) == (JobState.Retryable, now + 42 * SECOND)
    assert retried.attempt == 1


async def test_exhaustion_fails_with_one_error_per_attempt(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=3)
    for _ in range(3):
        claim = await claim_one(engine)
        await engine.engine.retry(claim.lease, error="nope", delay=timedelta(0))
        await engine.engine.promote_due()
    failed = await fetch(engine, job.id)
    assert failed.state == JobState.Failed
    assert failed.finalized_at == engine.clock.now()
    assert [entry["attempt"] for entry in failed.errors] == [1, 2, 3]
    assert failed.attempt == 3
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_retry_after_on_last_attempt_fails(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=1)
    claim = await claim_one(engine)
    await engine.engine.retry(claim.lease, error="late", delay=timedelta(seconds=5))
    assert (await fetch(engine, job.id)).state == JobState.Failed


async def test_snooze_does_not_spend_an_attempt(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=1)
    for _ in range(3):
        claim = await claim_one(engine)
        now = engine.clock.now()
        assert await engine.engine.snooze(claim.lease, delay=10 * SECOND) == Ack.APPLIED
        snoozed = await fetch(engine, job.id)
        assert snoozed.state == JobState.Scheduled
        assert (snoozed.attempt, snoozed.run_at, snoozed.errors) == (0, now + 10 * SECOND, ())
        engine.clock.advance(9)
        assert await engine.engine.promote_due() == 0
        engine.clock.advance(1)
        assert await engine.engine.promote_due() == 1
    claim = await claim_one(engine)
    assert (claim.job.attempt, claim.lease.lease) == (1, 4)


async def test_cancel_attempt_records_no_error(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.cancel_attempt(claim.lease, reason="not needed") == Ack.APPLIED
    cancelled = await fetch(engine, job.id)
    assert cancelled.state == JobState.Cancelled
    assert cancelled.finalized_at == engine.clock.now() and cancelled.errors == ()


async def test_fail_is_terminal_and_marks_the_error(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=10)
    claim = await claim_one(engine)
    assert await engine.engine.fail(claim.lease, error="fatal") == Ack.APPLIED
    failed = await fetch(engine, job.id)
    assert failed.state == JobState.Failed and failed.finalized_at == engine.clock.now()
    assert failed.errors == (error_entry("fatal", attempt=1, at=engine.clock.now(), terminal=True),)


async def test_release_on_shutdown_gives_the_attempt_back(engine: EngineHandle) -> None:
    job = await enqueue(engine, max_attempts=1)
    claim = await claim_one(engine)
    engine.clock.advance(1)
    assert await engine.engine.release(claim.lease, error="shutting down") == Ack.APPLIED
    released = await fetch(engine, job.id)
    assert released.state == JobState.Retryable and released.run_at == engine.clock.now()
    assert released.attempt == 0
    assert released.errors == (error_entry("shutting down", attempt=1, at=engine.clock.now()),)
    assert await engine.engine.promote_due() == 1
    again = await claim_one(engine)
    assert (again.job.attempt, again.lease.lease) == (1, 2)


async def test_heartbeat_refreshes_only_running_attempts(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    engine.clock.advance(7)
    assert await engine.engine.heartbeat([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, claim.job.id)).heartbeat_at == engine.clock.now()


async def test_progress_persists_across_retry_and_clears_on_completion(
    engine: EngineHandle,
) -> None:
    job = await enqueue(engine, metadata={"keep": 1})
    claim = await claim_one(engine)
    engine.clock.advance(1)
    ack = await engine.engine.update_progress(
        claim.lease, progress={"step": 3}, metadata_updates={"extra": "x"}
    )
    assert ack == Ack.APPLIED
    stored = await fetch(engine, job.id)
    assert stored.progress == {"step": 3}
    assert stored.metadata == {"keep": 1, "extra": "x"}
    assert stored.heartbeat_at == engine.clock.now()
    await engine.engine.retry(claim.lease, error="again", delay=timedelta(0))
    assert (await fetch(engine, job.id)).progress == {"step": 3}
    await engine.engine.promote_due()
    second = await claim_one(engine)
    assert second.job.progress == {"step": 3}
    await engine.engine.update_progress(second.lease, progress=None)
    assert (await fetch(engine, job.id)).progress == {"step": 3}
    await engine.engine.update_progress(second.lease, progress={"step": 4})
    assert (await fetch(engine, job.id)).progress == {"step": 4}
    await engine.engine.complete([second.lease])
    done = await fetch(engine, job.id)
    assert done.progress is None and done.metadata == {"keep": 1, "extra": "x"}
