"""Queue-storage ring: the hot path only appends, and rotation / prune lose nothing."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest

from awa.adapters.clock import ManualClock, SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import Backoff, PruneOutcome, RingSeal, RotateOutcome
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "ring"
HOT_TABLES = ("ready_entries", "claims", "closures")


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, "qs_ring") as opened:
        yield opened


def _table_churn(migrated_database_url: str) -> tuple[int, int]:
    """Updates and deletes recorded on the ring's hot children."""
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_del), 0) "
            "FROM pg_stat_user_tables WHERE schemaname = 'qs_ring' "
            "AND relname ~ %s",
            ("^(" + "|".join(HOT_TABLES) + ")_[0-9]+$",),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_drain_never_updates_or_deletes_ring_rows(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE) for _ in range(300)])
    done = 0
    while claims := await engine.claim(QUEUE, limit=64):
        acks = await engine.complete([claim.lease for claim in claims])
        done += len(acks)
    assert done == 300
    await engine.close()  # backends exit and flush their table statistics
    updated, deleted = _table_churn(migrated_database_url)
    assert (updated, deleted) == (0, 0)
    counts = await _counts(migrated_database_url)
    assert counts == {"completed": 300}


async def _counts(migrated_database_url: str) -> dict[str, int]:
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute(
            "SELECT state::text, sum(n) FROM qs_ring.queue_counts GROUP BY 1 HAVING sum(n) <> 0"
        ).fetchall()
    return {state: int(n) for state, n in rows}


async def _race(engine: QueueStorageEngine, seconds: float) -> None:
    """Producers, claimers/completers and a leader rotating + pruning, all at once."""
    deadline = time.monotonic() + seconds
    enqueued: list[int] = []
    completions: Counter[int] = Counter()
    outcomes: Counter[str] = Counter()

    async def producer() -> None:
        while time.monotonic() < deadline:
            jobs = await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE)] * 20)
            enqueued.extend(job.id for job in jobs)
            await anyio.sleep(0.005)  # paces the producer over the race; nothing waits on it

    async def worker() -> None:
        while time.monotonic() < deadline:
            claims = await engine.claim(QUEUE, limit=16)
            if not claims:
                await anyio.sleep(0.005)  # an idle claimer's poll, as a worker's would be
                continue
            acks = await engine.complete([claim.lease for claim in claims])
            for claim, ack in zip(claims, acks, strict=True):
                assert ack.value == "applied"
                completions[claim.job.id] += 1

    async def leader() -> None:
        while time.monotonic() < deadline:
            outcomes[await engine.rotate_queue_ring()] += 1
            outcomes["prune:" + await engine.prune_oldest()] += 1
            await anyio.sleep(0.02)  # the leader's period in the race

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        tg.start_soon(leader)
        for _ in range(3):
            tg.start_soon(worker)

    # Drain what is left, still rotating and pruning between batches.
    while claims := await engine.claim(QUEUE, limit=100):
        for claim, ack in zip(
            claims, await engine.complete([c.lease for c in claims]), strict=True
        ):
            assert ack.value == "applied"
            completions[claim.job.id] += 1
        await engine.rotate_queue_ring()
        await engine.prune_oldest()

    assert outcomes["rotated"] > 0 and outcomes["prune:pruned"] > 0, outcomes
    # Every job ran exactly once: nothing was lost to a truncated slot, nothing ran twice.
    assert sorted(completions) == sorted(enqueued)
    assert set(completions.values()) == {1}
    # A queue whose history was pruned entirely is no longer listed: its counts are zero.
    counts = {c.queue: c.counts for c in await engine.queue_counts()}.get(QUEUE, {})
    pruned = (await engine.pruned_counts()).get(QUEUE, {}).get("completed", 0)
    assert counts.get(JobState.Available, 0) == 0 and counts.get(JobState.Running, 0) == 0
    assert counts.get(JobState.Completed, 0) + pruned == len(enqueued)


async def test_claims_and_completions_race_rotation_and_prune(
    engine: QueueStorageEngine,
) -> None:
    await _race(engine, 3.0)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_claims_and_completions_race_rotation_and_prune_for_30s(
    engine: QueueStorageEngine,
) -> None:
    await _race(engine, 30.0)


async def test_prune_carries_young_failed_jobs_forward(engine: QueueStorageEngine) -> None:
    (job,) = await engine.enqueue_many([JobSpec(kind="boom", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    await engine.fail(claim.lease, error="boom")
    assert await engine.rotate_queue_ring() == "rotated"
    # A sealed slot is kept until the ring wraps around to it (4 slots here).
    assert await engine.prune_oldest() == "idle"
    for _ in range(2):
        await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
        assert await engine.rotate_queue_ring() == "rotated"
    assert (await engine.get_job(job.id)) is not None
    # Its slot is next: it holds only terminal history, so the young failed job moves forward.
    assert await engine.prune_oldest() == "pruned"
    kept = await engine.get_job(job.id)
    assert kept is not None and kept.state == JobState.Failed
    retried = await engine.retry_job(job.id)
    assert retried is not None and retried.state == JobState.Available


async def test_completed_history_stays_readable_until_its_slot_is_two_ahead(
    engine: QueueStorageEngine,
) -> None:
    """Prune reclaims the oldest sealed slot once it is the next but one the ring enters
    (4 slots here): completed history stays readable for slot_count - 2 rotations."""
    (job,) = await engine.enqueue_many([JobSpec(kind="done", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await engine.rotate_queue_ring() is RotateOutcome.ROTATED
    assert await engine.prune_oldest() is PruneOutcome.IDLE
    await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
    kept = await engine.get_job(job.id)
    assert kept is not None and kept.state == JobState.Completed
    assert await engine.rotate_queue_ring() == "rotated"
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(job.id) is None


async def test_completions_per_minute_outlive_the_pruned_rows(engine: QueueStorageEngine) -> None:
    """The dashboard's throughput chart (finalized_by_queue) counts completed jobs from the
    per-minute completion buckets, so a job pruned minutes after it completed still counts
    for the hour; the rows themselves (and what is read from them) are gone."""
    jobs = await engine.enqueue_many([JobSpec(kind="done", queue=QUEUE) for _ in range(3)])
    claims = await engine.claim(QUEUE, limit=3)
    assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 3
    hour = timedelta(hours=1)

    def completed(buckets: list[Any]) -> int:
        return sum(b.count for b in buckets if b.state == JobState.Completed)

    assert completed(await engine.finalized_by_queue(window=hour)) == 3
    assert await engine.rotate_queue_ring() is RotateOutcome.ROTATED
    assert await engine.prune_oldest() is PruneOutcome.IDLE
    await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
    assert await engine.rotate_queue_ring() == "rotated"
    assert await engine.prune_oldest() == "pruned"
    assert [await engine.get_job(job.id) for job in jobs] == [None] * 3
    assert completed(await engine.finalized_timeseries(window=hour)) == 0
    (bucket,) = await engine.finalized_by_queue(window=hour)
    assert (bucket.queue, bucket.state, bucket.count) == (QUEUE, JobState.Completed, 3)


async def test_prune_takes_the_next_slot_before_the_one_after(engine: QueueStorageEngine) -> None:
    """When the slot the ring enters next still holds rows (its prune was blocked or
    skipped), prune reclaims it first: rotation needs it empty."""

    async def completed(kind: str) -> JobRecord:
        (job,) = await engine.enqueue_many([JobSpec(kind=kind, queue=QUEUE)])
        (claim,) = await engine.claim(QUEUE, limit=1)
        assert await engine.complete([claim.lease]) == [Ack.APPLIED]
        return job

    first = await completed("first")
    assert await engine.rotate_queue_ring() == "rotated"
    second = await completed("second")
    assert await engine.rotate_queue_ring() == "rotated"
    await completed("third")
    assert await engine.rotate_queue_ring() == "rotated"
    await completed("fourth")
    # current 3: slot 0 is next (holding `first`), slot 1 the one after (`second`)
    assert await engine.rotate_queue_ring() == "skipped_busy"
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(first.id) is None
    assert await engine.get_job(second.id) is not None
    assert await engine.rotate_queue_ring() == "rotated"
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(second.id) is None


async def test_late_completion_after_rescue_and_prune_changes_nothing(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A worker completes by the receipt it remembers from its claim. If the attempt was
    finalised elsewhere and its slot truncated meanwhile, the late completion is stale and
    writes nothing (the receipt is gone, so no closure lands in the reused slot)."""
    other = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff(), schema="qs_ring"
    )
    try:
        (job,) = await engine.enqueue_many([JobSpec(kind="slow", queue=QUEUE)])
        (claim,) = await engine.claim(QUEUE, limit=1)
        cancelled = await other.cancel_job(job.id)
        assert cancelled is not None and cancelled.state == JobState.Cancelled
        # Wrap the ring until the claim's slot has been truncated (4 slots).
        outcomes: Counter[str] = Counter()
        for _ in range(4):
            await other.enqueue_many([JobSpec(kind="filler", queue="other")])
            (filler,) = await other.claim("other", limit=1)
            await other.complete([filler.lease])
            outcomes[await other.rotate_queue_ring()] += 1
            outcomes[await other.prune_oldest()] += 1
        assert outcomes["pruned"] >= 1, outcomes
        assert await other.get_job(job.id) is None
        before = await _counts(migrated_database_url)
        assert await engine.complete([claim.lease]) == [Ack.STALE]
        assert await _counts(migrated_database_url) == before
        assert await other.get_job(job.id) is None
    finally:
        await other.close()


async def test_completion_by_remembered_receipt_is_applied_once(
    engine: QueueStorageEngine,
) -> None:
    jobs = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])
    claims = await engine.claim(QUEUE, limit=3)
    # The middle attempt heartbeats (it has a lease row), so it takes the general path.
    await engine.heartbeat([claims[1].lease])
    leases = [c.lease for c in claims]
    assert await engine.complete([*leases, leases[0]]) == [
        Ack.APPLIED,
        Ack.APPLIED,
        Ack.APPLIED,
        Ack.STALE,
    ]
    assert await engine.complete(leases) == [Ack.STALE] * 3
    for job in jobs:
        done = await engine.get_job(job.id)
        assert done is not None and done.state == JobState.Completed


async def test_prune_releases_the_unique_keys_and_counts_of_the_jobs_it_drops(
    engine: QueueStorageEngine,
) -> None:
    """A completed job keeps its unique key (the default mask includes completed) until
    its slot is pruned; prune drops it from the counts and gives the key back. A job
    that no longer held its key (cancelled) is dropped without releasing anyone's."""
    done_key, cancelled_key = b"prune-done", b"prune-cancelled"
    (done,) = await engine.enqueue_many([JobSpec(kind="u", queue=QUEUE, unique_key=done_key)])
    (cancelled,) = await engine.enqueue_many(
        [JobSpec(kind="u", queue=QUEUE, unique_key=cancelled_key)]
    )
    (claim,) = await engine.claim(QUEUE, limit=1)
    assert claim.job.id == done.id
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await engine.cancel_job(cancelled.id) is not None
    with pytest.raises(UniqueConflict):
        await engine.enqueue_many([JobSpec(kind="u", queue=QUEUE, unique_key=done_key)])
    assert await engine.rotate_queue_ring() == "rotated"
    # The cancelled job gave its key back; a new holder (in a later slot) takes it.
    (holder,) = await engine.enqueue_many(
        [JobSpec(kind="u", queue="other", unique_key=cancelled_key)]
    )
    for _ in range(3):
        await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
        assert await engine.rotate_queue_ring() in {"rotated", "skipped_busy"}
    before = {c.queue: c for c in await engine.queue_counts()}[QUEUE]
    assert before.count(JobState.Completed) == 1 and before.count(JobState.Cancelled) == 1
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(done.id) is None and await engine.get_job(cancelled.id) is None
    # A queue whose counts are all zero is no longer listed.
    after = {c.queue: c.counts for c in await engine.queue_counts()}.get(QUEUE, {})
    assert after.get(JobState.Completed, 0) == 0 and after.get(JobState.Cancelled, 0) == 0
    assert (await engine.pruned_counts())[QUEUE] == {"completed": 1, "cancelled": 1, "failed": 0}
    # The completed job's key is free again; the other key still has its new holder.
    (again,) = await engine.enqueue_many([JobSpec(kind="u", queue=QUEUE, unique_key=done_key)])
    assert again.id != done.id
    with pytest.raises(UniqueConflict):
        await engine.enqueue_many([JobSpec(kind="u", queue=QUEUE, unique_key=cancelled_key)])
    assert (await engine.get_job(holder.id)) is not None


async def test_the_leaders_seal_turns_the_ring_once_its_slot_is_full_or_old(
    migrated_database_url: str,
) -> None:
    hour = timedelta(hours=1)
    clock = ManualClock()
    async with installed_engine(
        migrated_database_url, "qs_seal", queue_slot_count=8, clock=clock
    ) as engine:
        await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE)])
        # the first turn since the install: how long the slot was current is not known
        assert await engine.rotate(seal=RingSeal(interval=hour)) == "rotated"
        await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE)] * 10)
        # ten small jobs in a slot that turned just now: neither full nor old
        assert await engine.rotate(seal=RingSeal(interval=hour)) == "skipped_filling"
        assert await _current_slot(migrated_database_url, "qs_seal") == 1
        # full: the slot's partitions take at least fill_bytes (one page here)
        assert await engine.rotate(seal=RingSeal(interval=hour, fill_bytes=8192)) == "rotated"
        await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE)])
        # old: current for max_intervals intervals, and not a moment before
        old = RingSeal(interval=timedelta(milliseconds=10), max_intervals=2)
        clock.advance(timedelta(milliseconds=19))
        assert await engine.rotate(seal=old) == "skipped_filling"
        clock.advance(timedelta(milliseconds=1))
        assert await engine.rotate(seal=old) == "rotated"
        await engine.enqueue_many([JobSpec(kind="noop", queue=QUEUE)])
        # an explicit rotation (no seal rule) turns at once; an empty slot never turns
        assert await engine.rotate() == "rotated"
        assert await engine.rotate(seal=old) == "skipped_idle"
        assert await _current_slot(migrated_database_url, "qs_seal") == 4


async def _current_slot(migrated_database_url: str, schema: str) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(f"SELECT current_slot FROM {schema}.ring_state").fetchone()
    assert row is not None
    return int(row[0])
