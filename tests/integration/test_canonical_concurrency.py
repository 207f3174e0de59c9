"""Concurrency on the canonical engine: SKIP LOCKED claims and stale-lease finalization."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.job import Claim, JobSpec
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

JOBS = 5_000
CLAIMERS = 8
NO_JITTER = Backoff(jitter=lambda: 0.0)


async def _drain(engine: CanonicalEngine) -> list[Claim]:
    claimed: list[Claim] = []
    while batch := await engine.claim("bulk", limit=37):
        claimed.extend(batch)
    return claimed


async def test_eight_claimers_take_every_job_exactly_once(migrated_database_url: str) -> None:
    producer = await CanonicalEngine.open(migrated_database_url)
    # One single-connection engine per claimer: eight separate database sessions.
    claimers = [
        await CanonicalEngine.open(migrated_database_url, max_connections=1)
        for _ in range(CLAIMERS)
    ]
    try:
        jobs = await producer.enqueue_many(
            [JobSpec(kind="bulk_job", queue="bulk", args={"n": n}) for n in range(JOBS)]
        )
        results = await asyncio.gather(*(_drain(engine) for engine in claimers))
        ids = Counter(claim.job.id for batch in results for claim in batch)
        assert len(ids) == JOBS and set(ids) == {job.id for job in jobs}
        assert max(ids.values()) == 1
        assert all(claim.lease.lease == 1 for batch in results for claim in batch)
        assert sum(1 for batch in results if batch) > 1, "claims were not spread over sessions"
        (counts,) = [c for c in await producer.queue_counts() if c.queue == "bulk"]
        assert counts.count(JobState.Running) == JOBS and counts.count(JobState.Available) == 0
    finally:
        for engine in [producer, *claimers]:
            await engine.close()


async def test_completion_with_a_stale_lease_after_rescue_changes_nothing(
    migrated_database_url: str,
) -> None:
    clock = ManualClock()
    engine = await CanonicalEngine.open(migrated_database_url, clock=clock, backoff=NO_JITTER)
    try:
        (job,) = await engine.enqueue_many([JobSpec(kind="flaky")])
        (first,) = await engine.claim("default", limit=1)
        clock.advance(timedelta(minutes=5))
        (rescued,) = await engine.rescue_stale_heartbeats(staleness=timedelta(minutes=1))
        assert rescued.lease == first.lease and rescued.new_state == JobState.Retryable
        after_rescue = await engine.get_job(job.id)

        assert await engine.complete([first.lease]) == [Ack.STALE]
        assert await engine.heartbeat([first.lease]) == [Ack.STALE]
        assert await engine.get_job(job.id) == after_rescue

        clock.advance(timedelta(seconds=2))  # the first retry's backoff is 2 s
        assert await engine.promote_due() == 1
        (second,) = await engine.claim("default", limit=1)
        assert second.lease.lease == first.lease.lease + 1
        running = await engine.get_job(job.id)
        assert await engine.complete([first.lease]) == [Ack.STALE]
        assert await engine.fail(first.lease, error="late") == Ack.STALE
        assert await engine.get_job(job.id) == running

        assert await engine.complete([second.lease]) == [Ack.APPLIED]
        done = await engine.get_job(job.id)
        assert done is not None and done.state == JobState.Completed
    finally:
        await engine.close()
