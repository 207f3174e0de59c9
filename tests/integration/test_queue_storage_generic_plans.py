"""Completion by receipt runs under its prepared generic plan. The connection the engine
keeps for it plans generically for its whole session, so the statement goes alone (one
round trip). When more completions run at once than the engine keeps connections for,
they run on pooled ones, which a caller's own transaction may take next: those are left
as they were.

Left to the server, the statement was planned afresh on every call (the planner never
preferred the generic plan), and planning every ring partition cost more than running it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.adapters.postgres_queue_storage.connections import KEPT_CONNECTIONS
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import RECEIPT_COMPLETION, completion_plans, prepared_plans

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_generic_plans"
QUEUE = "plans"
#: A phrase of the text of the claim a queue of one lane runs (claim.sql,
#: ``claim_lone_in_slot``).
LONE_IN_SLOT = "The claim of one lane in one ring slot"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    await install_queue_storage(
        migrated_database_url, SCHEMA, queue_slot_count=4, lease_slot_count=4
    )
    opened = await QueueStorageEngine.open(
        migrated_database_url,
        clock=SystemClock(),
        backoff=Backoff(),
        schema=SCHEMA,
        max_connections=1,
    )
    try:
        yield opened
    finally:
        await opened.close()


async def test_completion_uses_its_generic_plan_on_the_kept_connection(
    engine: QueueStorageEngine,
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={"n": i}) for i in range(12)])
    for _ in range(12):
        [claim] = await engine.claim(QUEUE, limit=1)
        assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await completion_plans(engine) == {"generic_plans": 12, "custom_plans": 0}
    [conn] = engine._parts.connections.kept["complete"].idle
    assert (await prepared_plans(conn, RECEIPT_COMPLETION))[2] == "force_generic_plan"
    counts = {c.queue: c for c in await engine.queue_counts()}
    assert counts[QUEUE].count(JobState.Completed) == 12
    assert counts[QUEUE].count(JobState.Running) == 0


async def test_the_claim_in_its_slot_runs_alone_under_its_generic_plan(
    engine: QueueStorageEngine,
) -> None:
    """The claim's kept connection plans generically for its session, so the claim is one
    statement and one round trip, and it is never planned for its parameters."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(8)])
    for _ in range(8):
        assert len(await engine.claim(QUEUE, limit=1)) == 1
    await engine._parts.claims.drain()  # the next slot's warm-up, if one is running
    generic = custom = 0
    for conn in engine._parts.connections.kept["claim"].idle:
        plans = await prepared_plans(conn, LONE_IN_SLOT)
        assert plans[2] == "force_generic_plan"
        generic, custom = generic + plans[0], custom + plans[1]
    # The first claim met an empty slot memory and ran ring-wide; the rest ran in the slot.
    assert generic >= 7 and custom == 0, (generic, custom)


async def test_completion_on_a_pooled_connection_leaves_its_session_as_it_was(
    engine: QueueStorageEngine,
) -> None:
    connections = engine._parts.connections
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(6)])
    claims = await engine.claim(QUEUE, limit=6)
    assert len(claims) == 6
    async with AsyncExitStack() as busy:
        # Every kept connection is in use: the completions take the pooled one.
        for _ in range(KEPT_CONNECTIONS):
            await busy.enter_async_context(connections.kept_conn("complete"))
        for claim in claims:
            assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    async with engine._pool.connection() as conn:
        plans = await prepared_plans(conn, RECEIPT_COMPLETION)
    assert plans == (6, 0, "auto")
    counts = {c.queue: c for c in await engine.queue_counts()}
    assert counts[QUEUE].count(JobState.Completed) == 6


async def test_queue_counts_use_their_generic_plan(engine: QueueStorageEngine) -> None:
    """Planning the overview (every ring partition, several times) cost ten times its run
    time while a backlog drained; it is planned once per connection instead."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])
    for _ in range(8):
        [counts] = await engine.queue_counts()
        assert counts.count(JobState.Available) == 3
    async with engine._pool.connection() as conn:
        cur = await conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ["%Everything queue_counts() needs%"],
        )
        [plans] = await cur.fetchall()
        cur = await conn.execute("SELECT current_setting('plan_cache_mode') AS mode")
        [setting] = await cur.fetchall()
    assert (plans["generic_plans"], plans["custom_plans"]) == (8, 0)
    assert setting["mode"] == "auto"


def _scanned(plan: dict[str, Any]) -> set[str]:
    """Relations the plan reads with a sequential scan, anywhere in it."""
    found = {plan["Relation Name"]} if plan["Node Type"] == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= _scanned(child)
    return found


async def test_completion_probes_each_receipt_instead_of_scanning_the_ring(
    engine: QueueStorageEngine,
) -> None:
    """Once the ring was full, the generic plan hashed every claims partition (15,000
    rows at 1,000 jobs/s) to check a handful of receipts: 12-30 ms a call, all of it CPU
    taken from the claims. Each receipt is looked up by its key in its own slot."""
    for _ in range(4):
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(1500)])
        while claims := await engine.claim(QUEUE, limit=500):
            assert set(await engine.complete([c.lease for c in claims])) == {Ack.APPLIED}
        await engine.rotate()
    [conn] = engine._parts.connections.kept["complete"].idle
    cur = await conn.execute(
        "SELECT name, cardinality(parameter_types) AS n FROM pg_prepared_statements "
        "WHERE statement LIKE %s",
        [f"%{RECEIPT_COMPLETION}%"],
    )
    prepared = await cur.fetchall()
    # One statement per slot the receipts named (each slot's own partitions).
    assert len(prepared) == 4
    for statement in prepared:
        args = ", ".join(["NULL"] * int(statement["n"]))
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cur = await conn.execute(f'EXPLAIN (FORMAT JSON) EXECUTE "{statement["name"]}"({args})')
            [row] = await cur.fetchall()
        scanned = _scanned(row["QUERY PLAN"][0]["Plan"])
        assert not {r for r in scanned if r.startswith(("claims", "closures", "leases"))}, scanned


async def _slot_claim_plans(engine: QueueStorageEngine, slot: int) -> list[tuple[int, int]]:
    """(generic, custom) plans of each claim statement for ``slot`` prepared on the kept
    claim connections, once a warm-up in flight has given its connection back."""
    await engine._parts.claims.drain()
    found = []
    for conn in list(engine._parts.connections.kept["claim"].idle):
        cur = await conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s ORDER BY name",
            [f"%{LONE_IN_SLOT}%", f'%"ready_entries_{slot}"%'],
        )
        found += [(int(r["generic_plans"]), int(r["custom_plans"])) for r in await cur.fetchall()]
    return found


async def test_the_claim_of_the_slot_a_first_claim_found_rows_in_is_planned_off_its_path(
    engine: QueueStorageEngine,
) -> None:
    """A worker's first claim of a queue reads the whole ring: it does not know the slot
    yet. The claim of the slot it found rows in is then planned in the background, so the
    next claim (the first job after a warm-up job, say) runs a statement already planned."""
    options: dict[str, Any] = {
        "limit": 1,
        "deadline": timedelta(minutes=5),
        "aging_interval": timedelta(seconds=60),
    }
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    async with engine._pool.connection() as conn:
        cur = await conn.execute(f"SELECT current_slot FROM {SCHEMA}.ring_state")
        [state] = await cur.fetchall()
    slot = state["current_slot"]
    assert len(await engine.claim(QUEUE, **options)) == 1
    await engine._parts.claims.drain()
    # planned once, claiming nothing
    assert await _slot_claim_plans(engine, slot) == [(1, 0)]
    (job,) = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, **options)
    assert claim.job.id == job.id
    # the claim ran that very statement and plan
    assert await _slot_claim_plans(engine, slot) == [(2, 0)]


async def test_the_claim_of_the_slot_the_ring_enters_next_is_planned_ahead(
    engine: QueueStorageEngine,
) -> None:
    """Once a claim sees the ring in a new slot, the engine plans the claim of the slot it
    enters next on the kept claim connection, off the claim's path. The first claim after
    the next rotation then runs that very prepared statement (same parameter types), so
    no job waits for its planning."""
    # as a worker claims: with a deadline and priority aging
    options: dict[str, Any] = {
        "limit": 1,
        "deadline": timedelta(minutes=5),
        "aging_interval": timedelta(seconds=60),
    }
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    for _ in range(2):
        assert len(await engine.claim(QUEUE, **options)) == 1
    await engine._parts.claims.drain()
    async with engine._pool.connection() as conn:
        cur = await conn.execute(f"SELECT current_slot, slot_count FROM {SCHEMA}.ring_state")
        [state] = await cur.fetchall()
    ahead = (state["current_slot"] + 1) % state["slot_count"]
    # planned once, claiming nothing
    assert await _slot_claim_plans(engine, ahead) == [(1, 0)]
    assert await engine.rotate() == "rotated"
    (job,) = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, **options)
    assert claim.job.id == job.id
    # the same statement and plan ran the claim in that slot
    assert await _slot_claim_plans(engine, ahead) == [(2, 0)]


async def test_a_release_after_a_receipt_completion_is_planned_for_its_jobs(
    engine: QueueStorageEngine, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion that releases a waiting job runs again in a transaction on the kept
    connection, which plans generically; the release itself (the child's snapshot read
    by job id and its writes) plans as the session would by default: under a generic
    plan the snapshot read scanned every ring partition (40-70 ms a release at 2,000
    finished jobs, the join's hand-off)."""
    [parent] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [child] = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, depends_on=(parent.id,))])
    assert child.state == JobState.Scheduled
    outcomes = engine._parts.completion._outcomes
    change_jobs = outcomes.change_jobs
    modes: list[str] = []

    async def recorded(conn: Any, writes: Any, changes: Any) -> None:
        cur = await conn.execute("SELECT current_setting('plan_cache_mode') AS mode")
        modes.extend(str(row["mode"]) for row in await cur.fetchall())
        await change_jobs(conn, writes, changes)

    monkeypatch.setattr(outcomes, "change_jobs", recorded)
    [claim] = await engine.claim(QUEUE, limit=1)
    assert claim.job.id == parent.id
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as fresh:
        cur = await fresh.execute("SHOW plan_cache_mode")
        row = await cur.fetchone()
        assert row is not None
        assert modes == [str(row[0])] and modes != ["force_generic_plan"]
    [released] = await engine.claim(QUEUE, limit=1)
    assert released.job.id == child.id
    [conn] = engine._parts.connections.kept["complete"].idle
    assert (await prepared_plans(conn, RECEIPT_COMPLETION))[2] == "force_generic_plan"
