"""A claim whose snapshot predates a retire's commit does not take the retired row.

The window is made wide on purpose: the engine's own claim statement runs with a pause
inserted after its snapshot is taken and before it locks the lane heads, and a cancel,
an ``awa.jobs`` edit or delete, or a drain commits during the pause. Before the lane mark
(migration 0380) the claim took the retired row every time (ADR 0006, "Retiring
unclaimed rows").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.claim import claim_parameters
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "marked"
#: The advisory lock (two keys) a gated statement waits for, shared, in its first filter.
GATE = (7041, 2212)
# The first filter of the lane-head scan: an uncorrelated sub-select there runs once,
# when the first head is read, after the statement's snapshot and before any head lock.
HEAD_FILTER = "WHERE h.queue = %(queue)s\n      -- A lane with nothing"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff()
    )
    try:
        yield opened
    finally:
        await opened.close()


def _text(engine: QueueStorageEngine, statement: str) -> str:
    """The statement as the engine runs it; claim_in_slot for the ring's current slot,
    where the test's jobs are."""
    statements = engine._parts.statements
    if statement != "claim_in_slot":
        return statements.text(statement)
    conninfo = engine._parts.connections.pool.conninfo
    assert isinstance(conninfo, str)
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT current_slot FROM awa.ring_state").fetchone()
    assert row is not None
    return statements.for_slot(statement, int(row[0])).decode()


def _gated(engine: QueueStorageEngine, statement: str) -> str:
    """``statement`` waiting at the gate (:func:`_gate`) once its snapshot is taken."""
    text = _text(engine, statement)
    assert text.count(HEAD_FILTER) == 1
    head, rest = HEAD_FILTER.split("\n", 1)
    wait = f"(SELECT count(*) FROM pg_advisory_xact_lock_shared({GATE[0]}, {GATE[1]}))"
    return text.replace(HEAD_FILTER, f"{head} AND {wait} = 1\n{rest}")


@asynccontextmanager
async def _gate(url: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Hold the gate shut for the block; it gives a function that returns once a gated
    statement waits at the gate. The gate opens when the block ends."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s, %s)", GATE)

        async def someone_waits() -> bool:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND classid = %s AND objid = %s AND objsubid = 2",
                GATE,
            )
            row = await cur.fetchone()
            return row is not None and row[0] > 0

        async def waiting() -> None:
            await until(someone_waits, "a gated statement waits at the gate")

        try:
            yield waiting
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)", GATE)


async def _slow_claim(
    engine: QueueStorageEngine, url: str, statement: str, retire: Callable[[], Awaitable[Any]]
) -> list[dict[str, Any]]:
    """Run ``statement`` gated; ``retire`` commits while it waits at the gate."""
    params = claim_parameters(QUEUE, 2, engine._clock.now())
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row
    ) as conn:
        async with _gate(url) as waiting:
            claim = asyncio.create_task(conn.execute(_gated(engine, statement).encode(), params))
            await waiting()
            assert not claim.done()
            await retire()
        cur = await claim
        return list(await cur.fetchall())


async def _edit(url: str, statement: str, job_id: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(statement.encode(), (job_id,))
        assert cur.rowcount == 1


RETIRERS: dict[str, Callable[[QueueStorageEngine, str, int], Awaitable[Any]]] = {
    "cancel": lambda engine, url, job_id: engine.cancel_job(job_id),
    "drain": lambda engine, url, job_id: engine.drain_queue(QUEUE),
    "view_update": lambda engine, url, job_id: _edit(
        url, "UPDATE awa.jobs SET priority = 1 WHERE id = %s", job_id
    ),
    "view_delete": lambda engine, url, job_id: _edit(
        url, "DELETE FROM awa.jobs WHERE id = %s", job_id
    ),
}


@pytest.mark.parametrize("statement", ["claim", "claim_in_slot"])
@pytest.mark.parametrize("retirer", sorted(RETIRERS))
async def test_a_claim_older_than_a_retire_leaves_the_retired_row(
    engine: QueueStorageEngine, migrated_database_url: str, retirer: str, statement: str
) -> None:
    first, second = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=2) for _ in range(2)]
    )
    rows = await _slow_claim(
        engine,
        migrated_database_url,
        statement,
        lambda: RETIRERS[retirer](engine, migrated_database_url, first.id),
    )
    taken = [row["id"] for row in rows if row["id"] is not None]
    assert first.id not in taken
    # The lane was left alone whole, and the claim says so: the engine claims again.
    assert taken == [] and rows[0]["contested"] is True
    again = await engine.claim(QUEUE, limit=2)
    expected = [] if retirer == "drain" else [second.id]
    if retirer == "view_update":
        # The edit appended the job again at priority 1: claimed once, as the new row.
        expected = [first.id, second.id]
    assert [c.job.id for c in again] == expected
    job = await engine.get_job(first.id)
    if retirer in {"cancel", "drain"}:
        assert job is not None and job.state == JobState.Cancelled
    elif retirer == "view_delete":
        assert job is None
    counts = next(c for c in await engine.queue_counts() if c.queue == QUEUE)
    assert all(n >= 0 for n in counts.counts.values())
    assert counts.counts[JobState.Available] == 0


async def test_a_sorted_claim_older_than_a_cancel_leaves_the_cancelled_row(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    first, _ = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=2) for _ in range(2)]
    )
    rows = await _slow_claim(
        engine, migrated_database_url, "claim_sorted", lambda: engine.cancel_job(first.id)
    )
    assert [row["id"] for row in rows if row["id"] is not None] == []
    assert rows[0]["contested"] is True


async def test_a_claim_that_sees_the_retire_takes_the_lane_as_usual(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The mark only turns away claims whose snapshot cannot see it."""
    first, second = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=2) for _ in range(2)]
    )
    await engine.cancel_job(first.id)
    with psycopg.connect(migrated_database_url) as conn:
        marked = conn.execute(
            "SELECT count(*) FROM awa.claim_heads WHERE queue = %s AND retired_xid IS NOT NULL",
            (QUEUE,),
        ).fetchone()
    assert marked == (1,)
    assert [c.job.id for c in await engine.claim(QUEUE, limit=2)] == [second.id]


async def test_a_drain_marks_each_lane_once(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A drain retires many rows of one lane in one transaction: one new version of the
    lane's head, not one per row (they could not be pruned before the drain commits)."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(50)])
    with psycopg.connect(migrated_database_url, autocommit=True) as conn, conn.transaction():
        marked = conn.execute(
            "SELECT awa.queue_storage_retire_lanes('awa', ARRAY[queue], ARRAY[priority], "
            "ARRAY[shard]) FROM awa.claim_heads WHERE queue = %s",
            (QUEUE,),
        ).fetchall()
        again = conn.execute(
            "SELECT awa.queue_storage_retire_lanes('awa', ARRAY[queue], ARRAY[priority], "
            "ARRAY[shard]) FROM awa.claim_heads WHERE queue = %s",
            (QUEUE,),
        ).fetchall()
    assert marked == [(1,)] and again == [(0,)]
    assert await engine.drain_queue(QUEUE) == 50


async def test_claim_takes_the_rest_of_the_batch_at_once_after_leaving_a_lane(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The engine runs the statement again under a new snapshot when one left a lane
    alone, so a cancel does not cost the worker a poll interval."""
    first, second = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=2) for _ in range(2)]
    )
    engine._parts.statements._bytes["claim"] = _gated(engine, "claim").encode()
    async with _gate(migrated_database_url) as waiting:
        claim = asyncio.create_task(engine.claim(QUEUE, limit=2))
        await waiting()
        assert not claim.done()
        assert (await engine.cancel_job(first.id)) is not None
    assert [c.job.id for c in await claim] == [second.id]
