"""Sequences where the queue-storage engine once disagreed with the in-memory model.

Each test replays the failing operation sequence on the queue-storage engine (and, for
the observable being checked, on the model) and compares the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec, QueueCounts
from awa.domain.states import JobState
from awa.ports.storage import StorageEngine
from tests.support.engines import CONTRACT_BACKOFF

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def qs(migrated_database_url: str, clock: ManualClock) -> AsyncIterator[QueueStorageEngine]:
    engine = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF
    )
    try:
        yield engine
    finally:
        await engine.close()


@pytest.fixture
def model(clock: ManualClock) -> InMemoryEngine:
    return InMemoryEngine(clock, CONTRACT_BACKOFF)


async def _counts(engine: StorageEngine, queue: str) -> QueueCounts:
    found = [c for c in await engine.queue_counts() if c.queue == queue]
    assert len(found) == 1
    return found[0]


async def test_completing_a_heartbeated_attempt_counts_as_completed_last_hour(
    qs: QueueStorageEngine, model: InMemoryEngine
) -> None:
    """enqueue 2 -> claim 2 -> heartbeat one -> complete it: the completion counted once."""
    for engine in (model, qs):
        await engine.enqueue_many([JobSpec(kind="k", queue="alpha") for _ in range(2)])
        claims = await engine.claim("alpha", limit=2)
        await engine.heartbeat([claims[0].lease])
        await engine.complete([claims[0].lease])
    real, expected = await _counts(qs, "alpha"), await _counts(model, "alpha")
    assert real == expected
    assert real.completed_last_hour == 1
    assert real.counts[JobState.Completed] == 1
    assert real.counts[JobState.Running] == 1


async def test_completed_last_hour_forgets_retried_and_deleted_jobs(
    qs: QueueStorageEngine, model: InMemoryEngine, clock: ManualClock
) -> None:
    """A delete takes a completion out of the recent count (an operator retry of a
    completed job is refused, as in awa-pg, and leaves it counted), and the window slides
    exactly at one hour even inside a minute bucket."""
    for engine in (model, qs):
        jobs = await engine.enqueue_many([JobSpec(kind="k", queue="alpha") for _ in range(3)])
        claims = await engine.claim("alpha", limit=3)
        await engine.complete([c.lease for c in claims])
        await engine.retry_job(jobs[0].id)
        await engine.delete_jobs([jobs[1].id, jobs[2].id])
    assert (await _counts(qs, "alpha")) == (await _counts(model, "alpha"))
    assert (await _counts(qs, "alpha")).completed_last_hour == 1

    clock.advance(timedelta(minutes=59, seconds=59, microseconds=999_999))
    assert (await _counts(qs, "alpha")).completed_last_hour == 1
    clock.advance(timedelta(microseconds=1))
    assert (await _counts(qs, "alpha")) == (await _counts(model, "alpha"))
    assert (await _counts(qs, "alpha")).completed_last_hour == 0


async def test_promoted_job_with_an_older_run_at_is_claimed_first(
    qs: QueueStorageEngine, model: InMemoryEngine, clock: ManualClock
) -> None:
    """A deferred job promoted after newer jobs joined its lane still goes first by run_at:
    the lane is marked out of order and the claim sorts its window."""
    for engine in (model, qs):
        await engine.enqueue_many(
            [JobSpec(kind="late", queue="alpha", run_at=clock.now() + timedelta(seconds=1))]
        )
    clock.advance(timedelta(seconds=5))
    for engine in (model, qs):
        await engine.enqueue_many([JobSpec(kind="fresh", queue="alpha")])
        assert await engine.promote_due() == 1
    kinds = {}
    for name, engine in (("model", model), ("qs", qs)):
        claims = await engine.claim("alpha", limit=1)
        kinds[name] = [c.job.kind for c in claims]
    assert kinds["qs"] == kinds["model"] == ["late"]
    counts = await _counts(qs, "alpha")
    assert counts == await _counts(model, "alpha")


async def test_old_completion_does_not_stand_in_for_a_deleted_recent_one(
    qs: QueueStorageEngine, model: InMemoryEngine, clock: ManualClock
) -> None:
    """complete A; two hours later complete B, then delete B: nothing completed in the
    last hour (A is old, B is gone)."""
    for engine in (model, qs):
        await engine.enqueue_many([JobSpec(kind="a", queue="alpha")])
        (claim,) = await engine.claim("alpha", limit=1)
        await engine.complete([claim.lease])
    clock.advance(timedelta(hours=2))
    for engine in (model, qs):
        (job,) = await engine.enqueue_many([JobSpec(kind="b", queue="alpha")])
        (claim,) = await engine.claim("alpha", limit=1)
        await engine.complete([claim.lease])
        assert await engine.delete_jobs([job.id]) == 1
    real = await _counts(qs, "alpha")
    assert real == await _counts(model, "alpha")
    assert real.completed_last_hour == 0
    assert real.counts[JobState.Completed] == 1


async def test_unique_conflict_inside_a_unit_of_work_leaves_it_usable(
    qs: QueueStorageEngine,
) -> None:
    """The batch that clashes inserts nothing, not even the keys it claimed before the
    clash, and the caller's transaction goes on and commits."""
    await qs.enqueue_many([JobSpec(kind="k", queue="q", unique_key=b"b" * 16)])
    async with qs.transaction() as uow:
        with pytest.raises(UniqueConflict):
            await qs.enqueue_many(
                [
                    JobSpec(kind="k", queue="q", unique_key=b"a" * 16),
                    JobSpec(kind="k", queue="q", unique_key=b"b" * 16),
                ],
                uow=uow,
            )
        # Key "a" was given back, so the same transaction can take it.
        await qs.enqueue_many([JobSpec(kind="k", queue="q", unique_key=b"a" * 16)], uow=uow)
    claimed = await qs.claim("q", limit=10)
    assert sorted(bytes(c.job.unique_key or b"") for c in claimed) == [b"a" * 16, b"b" * 16]


async def test_a_lane_that_needs_sorting_is_claimed_in_order_then_walked_again(
    qs: QueueStorageEngine, model: InMemoryEngine, clock: ManualClock
) -> None:
    """A promoted job with an older run_at lands behind newer rows of its lane: the claim
    must notice the unordered window and take the oldest job first, and go back to the
    ordered walk once the lane is consumed."""
    for engine in (model, qs):
        (fresh,) = await engine.enqueue_many([JobSpec(kind="k", queue="sort")])
        (late,) = await engine.enqueue_many(
            [JobSpec(kind="k", queue="sort", run_at=clock.now() - timedelta(hours=1))]
        )
        assert await engine.promote_due() == 1
        first = await engine.claim("sort", limit=1)
        second = await engine.claim("sort", limit=1)
        assert [c.job.id for c in first + second] == [late.id, fresh.id]
        (after,) = await engine.enqueue_many([JobSpec(kind="k", queue="sort")])
        assert [c.job.id for c in await engine.claim("sort", limit=5)] == [after.id]
