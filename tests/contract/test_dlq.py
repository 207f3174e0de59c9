"""The dead-letter queue: routing, listing and paging, retry, purge, moves and cleanup."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.job import DlqEntry
from awa.domain.states import JobState
from awa.ports.storage import DlqFilter, JobFilter
from tests.contract._support import (
    QUEUE,
    SECOND,
    claim_one,
    counts_for,
    enable_dlq,
    enqueue,
    failed_job,
    fetch,
)
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def _dead(
    engine: EngineHandle,
    queue: str = QUEUE,
    *,
    kind: str = "contract_job",
    tags: tuple[str, ...] = (),
) -> DlqEntry:
    """Enqueue into a DLQ-enabled queue and fail terminally; return the DLQ entry."""
    await enable_dlq(engine, queue)
    job = await enqueue(engine, kind, queue=queue, tags=tags)
    claim = await claim_one(engine, queue)
    assert claim.job.id == job.id
    await engine.engine.fail(claim.lease, error="fatal")
    entry = await engine.engine.get_dlq(job.id)
    assert entry is not None
    return entry


async def test_terminal_failure_lands_in_the_dlq(engine: EngineHandle) -> None:
    entry = await _dead(engine)
    assert entry.reason == "terminal_error" and entry.dlq_at == engine.clock.now()
    assert entry.original_run_lease == 1
    assert entry.job.state == JobState.Failed
    assert entry.job.finalized_at == engine.clock.now()
    assert entry.job.errors[-1]["error"] == "fatal"
    assert await engine.engine.get_job(entry.job.id) is None
    assert await engine.engine.list_jobs(JobFilter()) == []
    counts = await counts_for(engine)
    assert sum(counts.counts.values()) == 0


async def test_exhausted_retries_land_in_the_dlq(engine: EngineHandle) -> None:
    await enable_dlq(engine)
    job = await enqueue(engine, max_attempts=2)
    for _ in range(2):
        claim = await claim_one(engine)
        await engine.engine.retry(claim.lease, error="again", delay=timedelta(0))
        await engine.engine.promote_due()
    entry = await engine.engine.get_dlq(job.id)
    assert entry is not None and entry.reason == "max_attempts_exhausted"
    assert len(entry.job.errors) == 2 and entry.original_run_lease == 2


async def test_dlq_is_opt_in_per_queue(engine: EngineHandle) -> None:
    await enable_dlq(engine, "held")
    failed = await failed_job(engine)
    assert failed.state == JobState.Failed
    assert await engine.engine.get_dlq(failed.id) is None
    await engine.engine.set_queue_dlq("held", enabled=False)
    plain = await failed_job(engine, queue="held")
    assert plain.state == JobState.Failed and await engine.engine.dlq_depth() == 0


async def test_list_is_newest_first_with_filters(engine: EngineHandle) -> None:
    a = await _dead(engine, kind="alpha", tags=("red",))
    engine.clock.advance(1)
    b = await _dead(engine, kind="beta")
    engine.clock.advance(1)
    c = await _dead(engine, "other", kind="alpha")
    listed = await engine.engine.list_dlq(DlqFilter())
    assert [e.job.id for e in listed] == [c.job.id, b.job.id, a.job.id]
    alpha = await engine.engine.list_dlq(DlqFilter(kind="alpha"))
    assert [e.job.id for e in alpha] == [c.job.id, a.job.id]
    assert [e.job.id for e in await engine.engine.list_dlq(DlqFilter(queue="other"))] == [c.job.id]
    assert [e.job.id for e in await engine.engine.list_dlq(DlqFilter(tag="red"))] == [a.job.id]
    assert len(await engine.engine.list_dlq(DlqFilter(), limit=2)) == 2


async def test_dead_lettered_jobs_are_listed_by_id_as_list_jobs_lists_jobs(
    engine: EngineHandle,
) -> None:
    # Moved in the reverse order of their ids: the list is by id, not by when they moved.
    first = await failed_job(engine, kind="alpha")
    second = await failed_job(engine, kind="beta")
    live = await enqueue(engine, "alpha")
    await engine.engine.move_failed_to_dlq(second.id, reason="manual")
    engine.clock.advance(1)
    await engine.engine.move_failed_to_dlq(first.id, reason="manual")
    third = await _dead(engine, "other", kind="alpha", tags=("red",))
    listed = await engine.engine.list_dead_lettered(JobFilter())
    assert [job.id for job in listed] == [third.job.id, second.id, first.id]
    assert all(job.state == JobState.Failed for job in listed)
    entry = await engine.engine.get_dlq(second.id)
    assert entry is not None and listed[1] == entry.job
    alpha = await engine.engine.list_dead_lettered(JobFilter(kind="alpha"))
    assert [job.id for job in alpha] == [third.job.id, first.id]
    assert [j.id for j in await engine.engine.list_dead_lettered(JobFilter(queue="other"))] == [
        third.job.id
    ]
    assert [j.id for j in await engine.engine.list_dead_lettered(JobFilter(tag="red"))] == [
        third.job.id
    ]
    assert await engine.engine.list_dead_lettered(JobFilter(state=JobState.Available)) == []
    older = await engine.engine.list_dead_lettered(JobFilter(before_id=third.job.id), limit=1)
    assert [job.id for job in older] == [second.id]
    assert await engine.engine.list_dead_lettered(JobFilter(), limit=0) == []
    # The live job is list_jobs' alone.
    assert [job.id for job in await engine.engine.list_jobs(JobFilter())] == [live.id]


async def test_pages_are_disjoint_and_cover_everything(engine: EngineHandle) -> None:
    entries = []
    for index in range(7):
        entries.append(await _dead(engine))
        if index % 2:
            engine.clock.advance(1)
    seen: list[int] = []
    page_filter = DlqFilter()
    while True:
        page = await engine.engine.list_dlq(page_filter, limit=3)
        if not page:
            break
        seen.extend(entry.job.id for entry in page)
        last = page[-1]
        page_filter = DlqFilter(before_id=last.job.id, before_dlq_at=last.dlq_at)
    assert len(seen) == len(set(seen)) == 7
    assert set(seen) == {entry.job.id for entry in entries}
    by_time = await engine.engine.list_dlq(DlqFilter(before_dlq_at=entries[-1].dlq_at))
    assert all(entry.dlq_at < entries[-1].dlq_at for entry in by_time) and by_time
    by_id = await engine.engine.list_dlq(DlqFilter(before_id=entries[2].job.id))
    assert sorted(entry.job.id for entry in by_id) == [e.job.id for e in entries[:2]]


async def test_depth_and_depth_by_queue(engine: EngineHandle) -> None:
    assert await engine.engine.dlq_depth() == 0
    await _dead(engine)
    await _dead(engine)
    await _dead(engine, "other", kind="report")
    assert await engine.engine.dlq_depth() == 3
    assert await engine.engine.dlq_depth(QUEUE) == 2
    assert await engine.engine.dlq_depth_by_queue() == sorted([(QUEUE, 2), ("other", 1)])
    # By kind and queue: what the kind list adds to its job counts.
    assert await engine.engine.dlq_depth_by_kind() == [
        ("contract_job", QUEUE, 2),
        ("report", "other", 1),
    ]


async def test_retry_from_dlq_gives_a_fresh_budget(engine: EngineHandle) -> None:
    entry = await _dead(engine)
    engine.clock.advance(5)
    job = await engine.engine.retry_from_dlq(entry.job.id)
    assert job is not None and job.id == entry.job.id
    assert (job.state, job.run_at, job.attempt, job.run_lease) == (
        JobState.Available,
        engine.clock.now(),
        0,
        0,
    )
    assert job.finalized_at is None and job.errors == entry.job.errors
    assert await engine.engine.get_dlq(entry.job.id) is None
    assert await fetch(engine, job.id) == job
    claim = await claim_one(engine)
    assert (claim.job.id, claim.job.attempt, claim.lease.lease) == (job.id, 1, 1)
    assert await engine.engine.retry_from_dlq(entry.job.id) is None


async def test_retry_from_dlq_with_overrides(engine: EngineHandle) -> None:
    entry = await _dead(engine)
    later = engine.clock.now() + timedelta(minutes=5)
    job = await engine.engine.retry_from_dlq(
        entry.job.id, run_at=later, priority=1, queue="elsewhere"
    )
    assert job is not None
    assert (job.state, job.run_at, job.priority, job.queue) == (
        JobState.Scheduled,
        later,
        1,
        "elsewhere",
    )
    engine.clock.advance(timedelta(minutes=5))
    assert await engine.engine.promote_due() == 1
    assert (await claim_one(engine, "elsewhere")).job.id == entry.job.id


async def test_bulk_retry_and_purge(engine: EngineHandle) -> None:
    a = await _dead(engine, kind="alpha")
    b = await _dead(engine, kind="alpha")
    c = await _dead(engine, kind="beta")
    d = await _dead(engine, kind="gamma")
    assert await engine.engine.bulk_retry_from_dlq(DlqFilter(kind="alpha")) == 2
    assert {j.id for j in await engine.engine.list_jobs(JobFilter())} == {a.job.id, b.job.id}
    assert await engine.engine.purge_dlq(DlqFilter(kind="beta")) == 1
    assert await engine.engine.get_dlq(c.job.id) is None
    assert await engine.engine.purge_dlq_job(d.job.id) is True
    assert await engine.engine.purge_dlq_job(d.job.id) is False
    assert await engine.engine.dlq_depth() == 0


async def test_move_failed_to_dlq(engine: EngineHandle) -> None:
    failed = await failed_job(engine)
    live = await enqueue(engine)
    assert await engine.engine.move_failed_to_dlq(live.id, reason="manual") is None
    assert await engine.engine.move_failed_to_dlq(987_654_321, reason="manual") is None
    entry = await engine.engine.move_failed_to_dlq(failed.id, reason="manual")
    assert entry is not None
    assert (entry.job, entry.reason, entry.dlq_at) == (failed, "manual", engine.clock.now())
    assert entry.original_run_lease == failed.run_lease
    assert await engine.engine.get_job(failed.id) is None
    assert (await fetch(engine, live.id)).state == JobState.Available


async def test_bulk_move_failed_to_dlq(engine: EngineHandle) -> None:
    a = await failed_job(engine, kind="alpha")
    await failed_job(engine, kind="beta")
    moved = await engine.engine.bulk_move_failed_to_dlq(JobFilter(kind="alpha"), reason="ops")
    assert moved == 1
    entry = await engine.engine.get_dlq(a.id)
    assert entry is not None and entry.reason == "ops"
    assert await engine.engine.bulk_move_failed_to_dlq(JobFilter(), reason="ops") == 1
    assert await engine.engine.dlq_depth() == 2


async def test_cleanup_dlq_by_age_and_batch(engine: EngineHandle) -> None:
    old = [await _dead(engine) for _ in range(3)]
    engine.clock.advance(timedelta(days=1))
    fresh = await _dead(engine)
    assert await engine.engine.cleanup_dlq(retention=timedelta(days=1), batch_size=2) == 2
    assert await engine.engine.cleanup_dlq(retention=timedelta(days=1)) == 1
    assert [await engine.engine.get_dlq(e.job.id) for e in old] == [None, None, None]
    assert await engine.engine.get_dlq(fresh.job.id) == fresh
    engine.clock.advance(SECOND)
    assert await engine.engine.cleanup_dlq(retention=timedelta(days=1)) == 0
