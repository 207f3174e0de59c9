"""Operator read models: per-kind totals, finalization buckets and the job-list cursor."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.states import JobState
from awa.ports.storage import JobFilter
from tests.contract._support import QUEUE, claim_one, enqueue, enqueue_n
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def test_kind_counts_total_every_state_and_queue(engine: EngineHandle) -> None:
    await enqueue(engine, "mail")
    await enqueue(engine, "mail", queue="other")
    await enqueue(engine, "report")
    done = await claim_one(engine)
    await engine.engine.complete([done.lease])
    kinds = {k.kind: k for k in await engine.engine.kind_counts()}
    assert sorted(kinds) == ["mail", "report"]
    assert (kinds["mail"].job_count, kinds["mail"].queue_count) == (2, 2)
    assert kinds["report"].job_count == 1
    completed = sum(k.completed_last_hour for k in kinds.values())
    assert completed == 1
    engine.clock.advance(timedelta(hours=2))
    later = {k.kind: k for k in await engine.engine.kind_counts()}
    assert sum(k.completed_last_hour for k in later.values()) == 0
    assert later["mail"].job_count == 2


async def test_finalized_timeseries_buckets_terminal_jobs_per_minute(
    engine: EngineHandle,
) -> None:
    await enqueue_n(engine, 3)
    first = await claim_one(engine)
    await engine.engine.complete([first.lease])
    engine.clock.advance(timedelta(minutes=2))
    second = await claim_one(engine)
    await engine.engine.fail(second.lease, error="boom")
    third = await claim_one(engine)
    await engine.engine.complete([third.lease])
    series = await engine.engine.finalized_timeseries(window=timedelta(minutes=10))
    assert [(b.state, b.count) for b in series] == [
        (JobState.Completed, 1),
        (JobState.Completed, 1),
        (JobState.Failed, 1),
    ]
    assert series[0].bucket < series[1].bucket == series[2].bucket
    assert series[1].bucket.second == 0 and series[1].bucket.microsecond == 0
    recent = await engine.engine.finalized_timeseries(window=timedelta(minutes=1))
    assert sorted(b.count for b in recent) == [1, 1]


async def test_list_jobs_before_id_pages_newest_first(engine: EngineHandle) -> None:
    jobs = await enqueue_n(engine, 5)
    ids = [job.id for job in jobs]
    page1 = await engine.engine.list_jobs(JobFilter(), limit=2)
    assert [j.id for j in page1] == ids[::-1][:2]
    page2 = await engine.engine.list_jobs(JobFilter(before_id=page1[-1].id), limit=2)
    assert [j.id for j in page2] == ids[::-1][2:4]


async def test_finalized_by_queue_counts_each_queue_minute_and_dead_letters(
    engine: EngineHandle,
) -> None:
    await enqueue_n(engine, 2)
    await enqueue_n(engine, 1, queue="other")
    first = await claim_one(engine)
    await engine.engine.complete([first.lease])
    other = await claim_one(engine, "other")
    await engine.engine.complete([other.lease])
    engine.clock.advance(timedelta(minutes=2))
    failed = await claim_one(engine)
    await engine.engine.fail(failed.lease, error="boom")
    series = await engine.engine.finalized_by_queue(window=timedelta(minutes=10))
    assert [(b.queue, b.state, b.count) for b in series] == [
        (QUEUE, JobState.Completed, 1),
        ("other", JobState.Completed, 1),
        (QUEUE, JobState.Failed, 1),
    ]
    assert series[0].bucket == series[1].bucket < series[2].bucket
    assert all(b.bucket.second == 0 and b.bucket.microsecond == 0 for b in series)
    # A one-minute window starts at the minute holding now - 1 min: after the completions.
    recent = await engine.engine.finalized_by_queue(window=timedelta(minutes=1))
    assert [(b.queue, b.state) for b in recent] == [(QUEUE, JobState.Failed)]
    assert await engine.engine.dlq_by_minute(window=timedelta(minutes=10)) == []
    assert await engine.engine.move_failed_to_dlq(failed.job.id, reason="manual") is not None
    after = await engine.engine.finalized_by_queue(window=timedelta(minutes=10))
    assert [b.state for b in after] == [JobState.Completed, JobState.Completed]
    dead = await engine.engine.dlq_by_minute(window=timedelta(minutes=10))
    assert [(b.bucket, b.queue, b.state, b.count) for b in dead] == [
        (series[2].bucket, QUEUE, JobState.Failed, 1)
    ]
    engine.clock.advance(timedelta(minutes=30))
    assert await engine.engine.dlq_by_minute(window=timedelta(minutes=10)) == []
