"""Operator surface: counts, queue control, cancel, retry, delete, listing, retention."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.job import RunLease
from awa.domain.states import JobState
from awa.ports.storage import Ack, JobFilter
from tests.contract._support import (
    QUEUE,
    SECOND,
    claim_one,
    counts_for,
    enqueue,
    failed_job,
    fetch,
)
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def test_counts_are_exact_per_state_including_zeros(engine: EngineHandle) -> None:
    for _ in range(3):
        await enqueue(engine)
    await enqueue(engine, run_at=engine.clock.now() + SECOND)
    running = await claim_one(engine)
    done = await claim_one(engine)
    await engine.engine.complete([done.lease])
    await enqueue(engine, queue="other")
    counts = await counts_for(engine)
    assert counts.counts == {
        JobState.Scheduled: 1,
        JobState.Available: 1,
        JobState.Running: 1,
        JobState.Completed: 1,
        JobState.Retryable: 0,
        JobState.Failed: 0,
        JobState.Cancelled: 0,
        JobState.WaitingExternal: 0,
    }
    assert counts.completed_last_hour == 1 and not counts.paused
    assert running.job.state == JobState.Running
    assert [c.queue for c in await engine.engine.queue_counts()] == sorted([QUEUE, "other"])


async def test_queue_depths_count_live_jobs_only(engine: EngineHandle) -> None:
    first = await enqueue(engine)
    engine.clock.advance(5)
    for _ in range(3):
        await enqueue(engine)
    await enqueue(engine, run_at=engine.clock.now() + SECOND)
    done = await claim_one(engine)
    assert done.job.id == first.id
    await engine.engine.complete([done.lease])
    await claim_one(engine)
    await enqueue(engine, queue="other")
    depths = {d.queue: d for d in await engine.engine.queue_depths()}
    assert sorted(depths) == sorted([QUEUE, "other"])
    mine = depths[QUEUE]
    assert mine.counts == {
        JobState.Available: 2,
        JobState.Scheduled: 1,
        JobState.Retryable: 0,
        JobState.Running: 1,
        JobState.WaitingExternal: 0,
    }
    assert mine.oldest_available_at == first.run_at + 5 * SECOND
    assert depths["other"].count(JobState.Available) == 1
    await engine.engine.claim(QUEUE, limit=10)
    drained = {d.queue: d for d in await engine.engine.queue_depths()}.get(QUEUE)
    assert drained is None or (
        drained.count(JobState.Available) == 0 and drained.oldest_available_at is None
    )


async def test_completed_last_hour_and_lag(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.complete([claim.lease])
    oldest = await enqueue(engine)
    engine.clock.advance(10)
    await enqueue(engine)
    counts = await counts_for(engine)
    assert counts.oldest_available_at == oldest.run_at
    assert counts.lag(engine.clock.now()) == 10 * SECOND
    engine.clock.advance(timedelta(hours=1))
    assert (await counts_for(engine)).completed_last_hour == 0
    await engine.engine.claim(QUEUE, limit=10)
    counts = await counts_for(engine)
    assert counts.oldest_available_at is None and counts.lag(engine.clock.now()) is None


async def test_pause_resume_and_counts_of_an_empty_paused_queue(engine: EngineHandle) -> None:
    await engine.engine.pause_queue("idle", paused_by="ops")
    await engine.engine.pause_queue("idle")
    idle = await counts_for(engine, "idle")
    assert idle.paused and sum(idle.counts.values()) == 0 and len(idle.counts) == 8
    job = await enqueue(engine)
    await engine.engine.pause_queue(QUEUE)
    assert (await counts_for(engine)).paused
    assert await engine.engine.claim(QUEUE, limit=10) == []
    await enqueue(engine)
    await engine.engine.resume_queue(QUEUE)
    await engine.engine.resume_queue(QUEUE)
    assert not (await counts_for(engine)).paused
    assert (await claim_one(engine)).job.id == job.id


async def test_drain_cancels_pending_work_but_not_running(engine: EngineHandle) -> None:
    await enqueue(engine)
    running = await claim_one(engine)
    waiting_job = await enqueue(engine)
    waiting = await claim_one(engine)
    await engine.engine.register_callback(
        waiting.lease, callback_id="cb-drain", timeout=timedelta(minutes=1)
    )
    await engine.engine.wait_for_callback(waiting.lease)
    await enqueue(engine)
    await enqueue(engine, run_at=engine.clock.now() + SECOND)
    retry_job = await enqueue(engine)
    retry = await claim_one(engine)
    await engine.engine.retry(retry.lease, error="x")
    await enqueue(engine, queue="other")
    assert await engine.engine.drain_queue(QUEUE) == 4
    counts = await counts_for(engine)
    assert counts.count(JobState.Cancelled) == 4 and counts.count(JobState.Running) == 1
    assert counts.total_queued == 0
    assert (await fetch(engine, waiting_job.id)).finalized_at == engine.clock.now()
    assert (await fetch(engine, retry_job.id)).state == JobState.Cancelled
    assert (await counts_for(engine, "other")).count(JobState.Available) == 1
    assert await engine.engine.complete([running.lease]) == [Ack.APPLIED]


async def test_cancel_ready_and_scheduled_jobs(engine: EngineHandle) -> None:
    ready = await enqueue(engine)
    later = await enqueue(engine, run_at=engine.clock.now() + SECOND)
    engine.clock.advance(1)
    for job in (ready, later):
        cancelled = await engine.engine.cancel_job(job.id)
        assert cancelled is not None and cancelled.state == JobState.Cancelled
        assert cancelled.finalized_at == engine.clock.now()
    assert await engine.engine.promote_due() == 0
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_cancel_running_notifies_the_worker(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    subscription = await engine.notifier.subscribe(["awa:cancel"])
    try:
        await subscription.wait(0.05)
        cancelled = await engine.engine.cancel_job(job.id)
        assert cancelled is not None and cancelled.state == JobState.Cancelled
        assert cancelled.run_lease == claim.lease.lease
        assert "awa:cancel" in await subscription.wait(5)
    finally:
        await subscription.close()


async def test_cancel_terminal_is_unchanged_and_missing_is_none(engine: EngineHandle) -> None:
    assert await engine.engine.cancel_job(987_654_321) is None
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.complete([claim.lease])
    done = await fetch(engine, claim.job.id)
    engine.clock.advance(1)
    assert await engine.engine.cancel_job(done.id) == done


async def test_retry_job_of_each_kind_of_state(engine: EngineHandle) -> None:
    assert await engine.engine.retry_job(987_654_321) is None
    failed = await failed_job(engine)
    engine.clock.advance(5)
    retried = await engine.engine.retry_job(failed.id)
    assert retried is not None and retried.state == JobState.Available
    assert (retried.attempt, retried.run_at, retried.finalized_at) == (0, engine.clock.now(), None)
    assert retried.errors == failed.errors and retried.run_lease == failed.run_lease
    # A scheduled or retryable job is on its way: left as it is (awa-pg refuses it).
    later = await enqueue(engine, run_at=engine.clock.now() + timedelta(hours=1))
    assert await engine.engine.retry_job(later.id) == later
    assert await fetch(engine, later.id) == later
    claim = await claim_one(engine)
    assert await engine.engine.retry_job(claim.job.id) == claim.job
    assert claim.job.attempt == 1 and claim.lease.lease == failed.run_lease + 1
    # A completed job succeeded: an operator's retry leaves it as it is (awa-pg refuses it).
    await engine.engine.complete([claim.lease])
    done = await fetch(engine, claim.job.id)
    assert done.state == JobState.Completed
    engine.clock.advance(5)
    assert await engine.engine.retry_job(done.id) == done
    assert await fetch(engine, done.id) == done


async def test_retry_failed_and_discard_failed(engine: EngineHandle) -> None:
    first = await failed_job(engine, kind="alpha")
    second = await failed_job(engine, kind="alpha")
    other = await failed_job(engine, kind="beta")
    retried = await engine.engine.retry_failed(JobFilter(kind="alpha"))
    assert [job.id for job in retried] == [first.id, second.id]
    assert all(job.state == JobState.Available for job in retried)
    assert (await fetch(engine, other.id)).state == JobState.Failed
    await engine.engine.claim(QUEUE, limit=10)
    assert await engine.engine.discard_failed("alpha") == 0
    assert await engine.engine.discard_failed("beta") == 1
    assert await engine.engine.get_job(other.id) is None


async def test_pruned_failed_count_is_known_where_retention_counts(engine: EngineHandle) -> None:
    """Queue storage counts the failed rows its prune drops (0 before any); the other
    engines delete without counting and say ``None``."""
    await failed_job(engine, kind="alpha")
    # Routing asks the engine its producers write to.
    counted = engine.name in {"postgres_queue_storage", "routing_queue_storage", "routing_mixed"}
    assert await engine.engine.pruned_failed_count(QUEUE) == (0 if counted else None)


async def test_delete_jobs_spares_live_attempts(engine: EngineHandle) -> None:
    await enqueue(engine)
    running = await claim_one(engine)
    ready = await enqueue(engine)
    assert await engine.engine.delete_jobs([ready.id, running.job.id, 987_654_321]) == 1
    assert await engine.engine.get_job(ready.id) is None
    assert (await fetch(engine, running.job.id)).state == JobState.Running


async def test_list_jobs_filters_newest_first(engine: EngineHandle) -> None:
    a = await enqueue(engine, "alpha", tags=("red",))
    b = await enqueue(engine, "beta", tags=("red", "blue"))
    c = await enqueue(engine, "alpha", queue="other")
    d = await enqueue(engine, "alpha", run_at=engine.clock.now())
    listed = await engine.engine.list_jobs(JobFilter())
    assert [job.id for job in listed] == [d.id, c.id, b.id, a.id]
    assert [j.id for j in await engine.engine.list_jobs(JobFilter(kind="alpha"))] == [
        d.id,
        c.id,
        a.id,
    ]
    assert [j.id for j in await engine.engine.list_jobs(JobFilter(queue="other"))] == [c.id]
    assert [j.id for j in await engine.engine.list_jobs(JobFilter(tag="red"))] == [b.id, a.id]
    scheduled = await engine.engine.list_jobs(JobFilter(state=JobState.Scheduled))
    assert [job.id for job in scheduled] == [d.id]
    assert [j.id for j in await engine.engine.list_jobs(JobFilter(), limit=2)] == [d.id, c.id]


async def test_retention_respects_both_windows_and_batch_size(engine: EngineHandle) -> None:
    completed = []
    for _ in range(3):
        await enqueue(engine)
        claim = await claim_one(engine)
        await engine.engine.complete([claim.lease])
        completed.append(claim.job.id)
        engine.clock.advance(1)
    cancelled = await enqueue(engine)
    await engine.engine.cancel_job(cancelled.id)
    failed = await failed_job(engine)
    live = await enqueue(engine)
    engine.clock.advance(timedelta(hours=1))
    keep = {"completed": timedelta(hours=1), "failed": timedelta(hours=2)}

    async def cleanup(batch_size: int = 1000) -> int:
        return await engine.engine.cleanup_retention(
            completed=keep["completed"], failed=keep["failed"], batch_size=batch_size
        )

    assert await cleanup(2) == 2
    assert [await engine.engine.get_job(i) for i in completed[:2]] == [None, None]
    assert await cleanup(10) == 2
    assert await engine.engine.get_job(cancelled.id) is None
    assert (await fetch(engine, failed.id)).state == JobState.Failed
    engine.clock.advance(timedelta(hours=1))
    assert await cleanup() == 1
    assert await engine.engine.get_job(failed.id) is None
    assert await engine.engine.get_job(live.id) is not None


async def test_reset_removes_everything(engine: EngineHandle) -> None:
    job = await enqueue(engine, unique_key=b"r" * 16)
    await engine.engine.pause_queue("paused")
    await engine.engine.set_queue_dlq(QUEUE, enabled=True)
    held = await enqueue(engine, kind="held", max_attempts=1)
    await engine.engine.claim(QUEUE, limit=10)
    assert await engine.engine.fail(RunLease(held.id, 1), error="x") == Ack.APPLIED
    assert await engine.engine.dlq_depth() == 1
    await engine.engine.reset()
    assert await engine.engine.get_job(job.id) is None
    assert await engine.engine.queue_counts() == []
    assert await engine.engine.dlq_depth() == 0
    again = await enqueue(engine, unique_key=b"r" * 16)
    assert again.id > held.id
