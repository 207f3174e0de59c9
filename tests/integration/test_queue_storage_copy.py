"""Binary COPY enqueue on the queue-storage engine: same jobs, lanes and counters as
``enqueue_many``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.copy import _COPY_PIECE
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from awa.ports.storage import JobFilter
from tests.support.engines import CONTRACT_BACKOFF

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF
    )
    try:
        yield opened
    finally:
        await opened.close()


async def test_copy_enqueue_stores_claimable_jobs_in_fifo_order(
    engine: QueueStorageEngine, clock: ManualClock
) -> None:
    specs = [
        JobSpec(kind="bulk", queue="copy", args={"n": i}, tags=("a", "b"), metadata={"m": i})
        for i in range(250)
    ]
    assert await engine.enqueue_many_copy(specs[:100]) == 100
    assert await engine.enqueue_many_copy(specs[100:]) == 150
    jobs = await engine.list_jobs(JobFilter(queue="copy"), limit=1000)
    assert len(jobs) == 250
    assert {job.state for job in jobs} == {JobState.Available}
    first = min(jobs, key=lambda job: job.id)
    assert first.args == {"n": 0} and first.tags == ("a", "b") and first.metadata == {"m": 0}
    counts = next(c for c in await engine.queue_counts() if c.queue == "copy")
    assert counts.counts[JobState.Available] == 250
    assert counts.oldest_available_at == clock.now()

    seen: list[int] = []
    while claims := await engine.claim("copy", limit=64):
        seen.extend(claim.job.args["n"] for claim in claims)
        await engine.complete([claim.lease for claim in claims])
    assert seen == list(range(250))


async def test_copy_enqueue_defers_scheduled_specs_and_claims_unique_keys(
    engine: QueueStorageEngine, clock: ManualClock
) -> None:
    later = clock.now() + timedelta(seconds=30)
    inserted = await engine.enqueue_many_copy(
        [
            JobSpec(kind="now", queue="copy", unique_key=b"k-1"),
            JobSpec(kind="later", queue="copy", run_at=later),
        ]
    )
    assert inserted == 2
    states = {job.kind: job for job in await engine.list_jobs(JobFilter(queue="copy"))}
    assert states["now"].state == JobState.Available
    assert states["now"].unique_key == b"k-1"
    assert states["later"].state == JobState.Scheduled and states["later"].run_at == later

    with pytest.raises(UniqueConflict):
        await engine.enqueue_many_copy(
            [
                JobSpec(kind="other", queue="copy"),
                JobSpec(kind="dup", queue="copy", unique_key=b"k-1"),
            ]
        )
    # The clash inserted none of its batch.
    assert len(await engine.list_jobs(JobFilter(queue="copy"))) == 2

    clock.advance(timedelta(seconds=31))
    assert await engine.promote_due() == 1
    claimed = await engine.claim("copy", limit=10)
    assert [claim.job.kind for claim in claimed] == ["now", "later"]


async def test_copy_enqueue_joins_a_caller_transaction(engine: QueueStorageEngine) -> None:
    with pytest.raises(RuntimeError):
        async with engine.transaction() as uow:
            await engine.enqueue_many_copy([JobSpec(kind="t", queue="copy")], uow=uow)
            await engine.enqueue_many_copy([JobSpec(kind="t", queue="copy")], uow=uow)
            raise RuntimeError("roll back")
    assert await engine.list_jobs(JobFilter(queue="copy")) == []
    async with engine.transaction() as uow:
        assert await engine.enqueue_many_copy([JobSpec(kind="t", queue="copy")], uow=uow) == 1
    assert len(await engine.list_jobs(JobFilter(queue="copy"))) == 1


async def test_copy_enqueue_round_trips_awkward_values(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    awkward = 'tab\there, line\nbreak, back\\slash, "quote", {brace}, comma, é, \\N, \\x00'
    specs = [
        JobSpec(
            kind="odd",
            queue="copy",
            args={"text": awkward, "nested": [awkward, {"k\\": 1.5}], "none": None},
            metadata={"m": awkward},
            tags=(awkward, "", "NULL", "a,b"),
            ordering_key=b"\x00\\\t\n key",
        ),
        JobSpec(kind="plain", queue="copy", args=[1, 2], priority=1),
    ]
    assert await engine.enqueue_many_copy(specs) == 2
    claimed = {c.job.kind: c.job for c in await engine.claim("copy", limit=10)}
    odd = claimed["odd"]
    assert (odd.args, odd.metadata, odd.tags) == (specs[0].args, specs[0].metadata, specs[0].tags)
    assert claimed["plain"].args == [1, 2] and claimed["plain"].priority == 1
    found = await engine.get_job(odd.id)
    assert found is not None and found.args == specs[0].args
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
        cur = await conn.execute(
            "SELECT ordering_key, shard FROM awa.ready_entries WHERE job_id = %s", (odd.id,)
        )
        assert await cur.fetchone() == (specs[0].ordering_key, 0)


async def test_a_copy_sent_in_pieces_keeps_every_job_and_lane_order(
    engine: QueueStorageEngine,
) -> None:
    """A direct COPY larger than one piece (rows stream while the rest are encoded): jobs
    of different shapes interleave across pieces, each keeps its own values, counters add
    up per queue, and each queue's jobs come out in input order."""
    total = 2 * _COPY_PIECE + 7
    specs = [
        JobSpec(
            kind=f"kind_{i % 3}",
            queue=("pieces_a", "pieces_b")[i % 2],
            args={"n": i, "text": "tab\there \\ back"},
            priority=1 + i % 4,
            max_attempts=1 + i % 5,
            metadata={"m": i} if i % 3 else {},
            tags=(f"t{i % 2}",) if i % 4 else (),
            unique_states=None if i % 5 else 0b11110000,
            ordering_key=None if i % 7 else b"key",
        )
        for i in range(total)
    ]
    assert await engine.enqueue_many_copy(specs) == total
    jobs = {
        job.args["n"]: job
        for queue in ("pieces_a", "pieces_b")
        for job in await engine.list_jobs(JobFilter(queue=queue), limit=2 * total)
    }
    assert sorted(jobs) == list(range(total))
    for i, spec in enumerate(specs):
        job = jobs[i]
        assert (job.kind, job.queue, job.args, job.priority, job.max_attempts) == (
            spec.kind,
            spec.queue,
            spec.args,
            spec.priority,
            spec.max_attempts,
        )
        assert (job.metadata, job.tags, job.unique_states) == (
            spec.metadata,
            spec.tags,
            spec.effective_unique_states,
        )
    counts = {c.queue: c.counts[JobState.Available] for c in await engine.queue_counts()}
    assert counts["pieces_a"] + counts["pieces_b"] == total
    assert counts["pieces_a"] == sum(1 for s in specs if s.queue == "pieces_a")
    for queue in ("pieces_a", "pieces_b"):
        seen: dict[int, list[int]] = {}
        while claims := await engine.claim(queue, limit=128):
            for claim in claims:
                seen.setdefault(claim.job.priority, []).append(claim.job.args["n"])
            await engine.complete([claim.lease for claim in claims])
        # FIFO within each priority (a lane is one queue and priority, or a key's shard)
        for order in seen.values():
            unkeyed = [n for n in order if n % 7]
            assert unkeyed == sorted(unkeyed)
