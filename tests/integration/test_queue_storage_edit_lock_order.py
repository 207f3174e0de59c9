"""``UPDATE awa.jobs`` of unclaimed queue-storage jobs takes its locks in the one order
(lanes, then claim heads): two edits that meet in a lane, or an edit and an enqueue, wait
for each other at most, never deadlock (ADR 0006, "Lock order")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.batch_ops import BatchOpKind, BatchSpec, ItemOutcome
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "edit_order"
#: Long enough for a statement that waits for the other transaction to be seen waiting.
SETTLE = 0.5


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff()
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _edit(url: str, sql: str, job_id: int) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(sql, (job_id,))
        return cur.rowcount


async def _wait_briefly(task: asyncio.Task[object]) -> None:
    await asyncio.wait({task}, timeout=SETTLE)


async def _states(engine: QueueStorageEngine, ids: list[int]) -> list[tuple[str, int]]:
    found = []
    for job_id in ids:
        job = await engine.get_job(job_id)
        assert job is not None
        found.append((job.state.sql_name, job.priority))
    return found


REPRIORITISE = "UPDATE awa.jobs SET priority = 1 WHERE id = %s AND state = 'available'"
CANCEL = "UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = %s"


async def test_edits_meeting_in_a_lane_do_not_deadlock(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    moved, first, second = (
        job.id
        for job in await engine.enqueue_many(
            [JobSpec(kind="k", queue=QUEUE, priority=2) for _ in range(3)]
        )
    )
    # `moved` now lives in the priority-1 lane the other edits move their jobs to.
    assert await _edit(migrated_database_url, REPRIORITISE, moved) == 1
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        # An open transaction that retired a row of that lane (it marked the lane's head)...
        await held.execute(CANCEL, (moved,))
        # ...while another edit moves a job into the lane: it must not wait for the mark
        # while it holds the lane (it used to insert the lane's head over it and wait).
        other = asyncio.create_task(_edit(migrated_database_url, REPRIORITISE, first))
        await _wait_briefly(other)
        # The open transaction goes on and edits another job into the lane.
        await held.execute(REPRIORITISE, (second,))
        await held.commit()
        assert await other == 1
    assert await _states(engine, [moved, first, second]) == [
        ("cancelled", 1),
        ("available", 1),
        ("available", 1),
    ]


async def test_an_enqueue_into_a_lane_an_edit_marked_does_not_wait_for_it(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    key = b"k1"
    [keyed] = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=1, ordering_key=key)]
    )
    [loose] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=2)])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        # An open edit retired the keyed job's row: its lane's head carries the mark.
        await held.execute(CANCEL, (keyed.id,))
        # An enqueue into that lane holds the lane and must not wait for the mark.
        enqueue = asyncio.create_task(
            engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=1, ordering_key=key)])
        )
        await _wait_briefly(enqueue)
        assert enqueue.done(), "the enqueue waited for the open edit"
        # The edit goes on into the same lane (it takes the lane first now).
        await held.execute(REPRIORITISE, (loose.id,))
        await held.commit()
        [added] = await enqueue
    assert await _states(engine, [keyed.id, loose.id, added.id]) == [
        ("cancelled", 1),
        ("available", 1),
        ("available", 1),
    ]


async def test_a_batch_move_and_an_edit_into_one_lane_do_not_deadlock(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    key = b"k2"
    old = [
        job.id
        for job in await engine.enqueue_many(
            [JobSpec(kind="k", queue=QUEUE, priority=2, ordering_key=key) for _ in range(2)]
        )
    ]
    # The target lane exists (a job of priority 1 with the same key).
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=1, ordering_key=key)])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        # Someone holds the target lane (an enqueue in its transaction, say)...
        await held.execute(
            "SELECT 1 FROM awa.lanes WHERE queue = %s AND priority = 1 AND shard = 0 FOR UPDATE",
            (QUEUE,),
        )
        # ...an edit queues for it first, then a batch move of the other job: the move
        # must not mark the old lane's head before it has the new lane, or the edit, once
        # it has the lane, waits for that head while the move waits for the lane.
        edit = asyncio.create_task(_edit(migrated_database_url, REPRIORITISE, old[0]))
        await _wait_briefly(edit)
        move = asyncio.create_task(
            engine.apply_batch_change(old[1], BatchSpec(BatchOpKind.SET_PRIORITY, priority=1))
        )
        await _wait_briefly(move)
        await held.rollback()
        assert await edit == 1
        result = await move
    assert result.outcome == ItemOutcome.PROCESSED
    assert await _states(engine, old) == [("available", 1), ("available", 1)]
