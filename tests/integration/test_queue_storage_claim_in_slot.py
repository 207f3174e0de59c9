"""The claim in one ring slot: it goes on while a prune swaps another slot, and it never
takes a lane's rows out of order when the lane's window reaches into another slot.

The engine claims in the slot where the queue's last claimed rows were
(``claim_in_slot``), which reads that slot's partitions by name; only when a lane's
unclaimed rows are not all there does it claim over the whole ring (ADR 0006, "Claim in
one slot").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.swap import RING_TABLES
from awa.domain.errors import SchemaNotMigrated
from awa.domain.job import Claim, JobRecord, JobSpec
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_in_slot"
QUEUE = "in_slot"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


def _current_slot(migrated_database_url: str) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(f"SELECT current_slot FROM {SCHEMA}.ring_state").fetchone()
    assert row is not None
    return int(row[0])


async def _claimed_ids(engine: QueueStorageEngine, limit: int) -> list[int]:
    with anyio.fail_after(10):
        return [claim.job.id for claim in await engine.claim(QUEUE, limit=limit)]


class _PruneLock:
    """Holds the locks a prune of ``slot`` takes for its swap (the engine's own lock
    statement), in an open transaction, until the block ends."""

    def __init__(self, engine: QueueStorageEngine, migrated_database_url: str, slot: int) -> None:
        self._engine = engine
        self._url = migrated_database_url
        self._slot = slot
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None

    async def __aenter__(self) -> None:
        parts = self._engine._parts
        locked = parts.swap.locked(self._slot, RING_TABLES, ("ready_entries", "claims", "closures"))
        statement = parts.statements.render(
            "lock_nowait_then", tables=locked, then=sql.SQL("SELECT 1")
        )
        self._conn = await psycopg.AsyncConnection.connect(self._url)
        await self._conn.execute(statement)

    async def __aexit__(self, *exc: object) -> None:
        assert self._conn is not None
        await self._conn.rollback()
        await self._conn.close()


#: Attempts of _goes_on_while_pruned.
_ATTEMPTS = 3


async def _goes_on_while_pruned(
    engine: QueueStorageEngine,
    migrated_database_url: str,
    warm: Callable[[], Awaitable[object]],
    act: Callable[[], Awaitable[object]],
) -> int:
    """``act`` finishes while a prune of the slot after the current one holds its locks,
    once ``warm`` has warmed the backend on the current slot's partitions.

    A backend that lost its cached partition constraints (the server resets every cache
    of a backend that fell behind on catalog invalidations, as the other tests' schema
    installs can make it) reads the constraint again from the partition's parent on its
    next insert into the partition, and that waits for the prune's lock. So an attempt
    that waits is tried again from the warm-up, a few times: a statement that reads
    through the ring's parents waits in every attempt. Returns the attempts made."""
    for attempt in range(1, _ATTEMPTS + 1):
        await warm()
        # The claim plans the next slot's claim in the background (Claims._warm_next):
        # that slot is the one locked below, and the lock is taken NOWAIT.
        await engine._parts.claims.drain()
        other = (_current_slot(migrated_database_url) + 1) % 4
        async with _PruneLock(engine, migrated_database_url, other):
            try:
                with anyio.fail_after(5):
                    await act()
                return attempt
            except TimeoutError:
                continue
    pytest.fail(f"waited for the prune of another slot in {_ATTEMPTS} attempts")


async def test_a_claim_in_its_slot_goes_on_while_a_prune_holds_the_ring(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    jobs: list[JobRecord] = []

    async def warm() -> None:
        nonlocal jobs
        if jobs:
            # What the attempt that waited left unclaimed (its claim was cancelled).
            await engine.claim(QUEUE, limit=len(jobs))
        for _ in range(2):
            # The first claim finds the queue's rows in the current slot (and the slot's
            # claim is planned on the other kept connection); the second claims there,
            # and its backend reads that slot's partition bounds (once per partition).
            [job] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
            assert await _claimed_ids(engine, 1) == [job.id]
            await engine._parts.claims.drain()
        jobs = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])

    async def act() -> None:
        assert [c.job.id for c in await engine.claim(QUEUE, limit=3)] == [j.id for j in jobs]

    await _goes_on_while_pruned(engine, migrated_database_url, warm, act)


async def test_the_claim_over_the_whole_ring_waits_for_the_prune(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """What the claim in one slot avoids: with no slot to try (a new engine), the claim
    reads the ring's parents and waits for the swap's lock."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    other = (_current_slot(migrated_database_url) + 1) % 4
    async with _PruneLock(engine, migrated_database_url, other):
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.5):
                await engine.claim(QUEUE, limit=1)


async def test_a_lane_across_two_slots_is_claimed_in_order(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    [first] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    assert await _claimed_ids(engine, 1) == [first.id]
    older = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert await engine.rotate_queue_ring() == "rotated"
    newer = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    # One batch that needs rows of both slots: the ring-wide claim, in lane order.
    assert await _claimed_ids(engine, 3) == [job.id for job in [*older, newer[0]]]
    # The rest is in the current slot alone.
    assert await _claimed_ids(engine, 3) == [newer[1].id]


async def test_a_batch_that_fits_in_the_slot_takes_only_the_lane_prefix_there(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    [first] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    assert await _claimed_ids(engine, 1) == [first.id]
    older = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert await engine.rotate_queue_ring() == "rotated"
    newer = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert await _claimed_ids(engine, 2) == [job.id for job in older]
    assert await _claimed_ids(engine, 2) == [job.id for job in newer]


async def test_rows_written_to_an_older_slot_after_newer_ones_are_not_skipped(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A producer that read the current slot just before a rotation appends its rows to
    the older slot after rows of the same lane already went to the newer one: the claim
    in the newer slot sees the gap in the lane's positions and leaves the batch to the
    ring-wide claim."""
    [first] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    assert await _claimed_ids(engine, 1) == [first.id]
    start = _current_slot(migrated_database_url)
    assert await engine.rotate_queue_ring() == "rotated"
    [newer] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    assert await _claimed_ids(engine, 1) == [newer.id]  # the engine now claims in start + 1
    a, b = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    with psycopg.connect(migrated_database_url) as conn:
        # Move the first of the two back to the older slot, as that producer would have
        # written it (same fact, same lane position).
        conn.execute(
            f"UPDATE {SCHEMA}.ready_entries SET slot = %s WHERE job_id = %s", (start, a.id)
        )
        slots = conn.execute(
            f"SELECT job_id, slot FROM {SCHEMA}.ready_entries WHERE job_id = ANY(%s) "
            "ORDER BY job_id",
            ([a.id, b.id],),
        ).fetchall()
    assert slots == [(a.id, start), (b.id, (start + 1) % 4)]
    assert await _claimed_ids(engine, 1) == [a.id]
    assert await _claimed_ids(engine, 1) == [b.id]


async def test_a_slot_the_ring_does_not_have_fails_one_claim_only(
    engine: QueueStorageEngine,
) -> None:
    """A remembered slot that is gone (the schema was installed again with fewer slots)
    fails the claim that tries it; the next claim reads the whole ring."""
    [job] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    engine._parts.claims._slots[QUEUE] = 9
    with pytest.raises(SchemaNotMigrated, match="ready_entries_9"):
        await engine.claim(QUEUE, limit=1)
    assert await _claimed_ids(engine, 1) == [job.id]


async def test_completion_in_its_slot_goes_on_while_a_prune_holds_the_ring(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Receipts of one slot are closed by that slot's own statement (``complete_in_slot``),
    which neither waits for a prune's swap of another slot nor plans again after it."""
    claims: list[Claim] = []

    async def warm() -> None:
        nonlocal claims
        for _ in range(2):
            # Each round warms the completion's backend on this slot's partitions.
            await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
            [claim] = await engine.claim(QUEUE, limit=1)
            assert await engine.complete([claim.lease]) == [Ack.APPLIED]
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])
        claims = await engine.claim(QUEUE, limit=3)

    async def act() -> None:
        assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 3

    attempts = await _goes_on_while_pruned(engine, migrated_database_url, warm, act)
    counts = {c.queue: c for c in await engine.queue_counts()}[QUEUE]
    # The completion of an attempt that waited was cancelled by the client; the server
    # may still have finished it after the lock was released.
    assert counts.count(JobState.Completed) >= 5
    assert counts.count(JobState.Completed) + counts.count(JobState.Running) == 5 * attempts


async def test_receipts_of_two_slots_complete_together(engine: QueueStorageEngine) -> None:
    """Receipts that name different slots (claimed either side of a rotation) are closed by
    the ring-wide statement, each once; a repeat is stale."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [first] = await engine.claim(QUEUE, limit=1)
    assert await engine.rotate() == "rotated"
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [second] = await engine.claim(QUEUE, limit=1)
    assert first.job.id != second.job.id
    acks = await engine.complete([first.lease, second.lease, first.lease])
    assert acks == [Ack.APPLIED, Ack.APPLIED, Ack.STALE]
    for claim in (first, second):
        job = await engine.get_job(claim.job.id)
        assert job is not None and job.state == JobState.Completed


async def test_a_receipt_naming_a_slot_the_ring_lacks_is_completed_by_lookup(
    engine: QueueStorageEngine,
) -> None:
    """A receipt whose slot has no partition (kept from before the ring was installed again
    with fewer slots) fails the in-slot statement; the ring-wide one and the lookup by job
    id close the attempt instead, once."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, limit=1)
    entries = engine._parts.receipts.entries
    key = (claim.job.id, claim.lease.lease)
    _slot, claim_id, queue = entries[key]
    entries[key] = (9, claim_id, queue)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await engine.complete([claim.lease]) == [Ack.STALE]
    job = await engine.get_job(claim.job.id)
    assert job is not None and job.state == JobState.Completed
