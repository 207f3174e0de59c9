"""The claim of one lane (``claim_lone_in_slot``): a queue whose claims lock one lane in
lane order, or lanes whose rows all fit in the batch, claims with the statement without
the merge across lanes; a claim that locks lanes with more rows than the batch, a sorted
window or a keyed lane falls back to ``claim_in_slot`` at once, in the same claim() and
in the same order a single merged claim would give, and the queue goes back to the
one-lane statement once a claim locks lanes it would have taken (issue 39)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_lone_claim"
QUEUE = "lone"
#: Phrases of the two in-slot claim statements' texts (claim.sql).
LONE = "The claim of one lane in one ring slot"
MERGED = "The claim as one ring slot"


class _Behind(SystemClock):
    """A producer whose clock runs five seconds behind (its jobs sort first)."""

    def now(self) -> datetime:
        return super().now() - timedelta(seconds=5)


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


def _record(engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The in-slot claim statements the engine runs for the queue from now on, in order
    (not the warm-ups of the next slot, which claim for no queue)."""
    ran: list[str] = []
    statements = engine._parts.statements
    run_generic = statements.run_generic

    async def recorded(conn: Any, statement: bytes, params: Mapping[str, Any]) -> Any:
        text = statement.decode()
        if params.get("queue") != QUEUE:
            pass
        elif LONE in text:
            ran.append("lone")
        elif MERGED in text:
            ran.append("merged")
        return await run_generic(conn, statement, params)

    monkeypatch.setattr(statements, "run_generic", recorded)
    return ran


async def _learn_the_slot(engine: QueueStorageEngine) -> None:
    """A first claim reads the whole ring and remembers the slot its row was in."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    assert len(await engine.claim(QUEUE, limit=1)) == 1
    await engine._parts.claims.drain()


async def test_a_queue_of_one_lane_claims_with_the_one_lane_statement(
    engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _learn_the_slot(engine)
    ran = _record(engine, monkeypatch)
    jobs = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(5)])
    claimed = [c.job.id for _ in range(3) for c in await engine.claim(QUEUE, limit=2)]
    assert claimed == [job.id for job in jobs]
    assert ran == ["lone", "lone", "lone"]
    assert await engine.claim(QUEUE, limit=2) == []
    assert ran[-1] == "lone"


async def test_lanes_whose_rows_fit_in_the_batch_are_taken_whole_in_claim_order(
    engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _learn_the_slot(engine)
    ran = _record(engine, monkeypatch)
    low = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=3)])
    high = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=1)])
    claimed = [c.job.id for c in await engine.claim(QUEUE, limit=2)]
    assert claimed == [high[0].id, low[0].id]
    assert ran == ["lone"]
    assert await engine.claim(QUEUE, limit=2) == []


async def test_two_lanes_fall_back_to_the_merge_in_the_same_claim_and_come_back(
    engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _learn_the_slot(engine)
    ran = _record(engine, monkeypatch)
    # Two priorities are two lanes, more rows than the batch: the later job of the
    # better priority comes first.
    low = (await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=3)]))[0]
    high = (await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=1)]))[0]
    [first] = await engine.claim(QUEUE, limit=1)
    assert first.job.id == high.id
    # The one-lane statement locked two lanes, claimed nothing and said so; the merged
    # claim ran at once, in the same claim().
    assert ran == ["lone", "merged"]
    assert QUEUE in engine._parts.claims._several
    [second] = await engine.claim(QUEUE, limit=1)
    assert second.job.id == low.id
    # The merged claim locked one lane: the queue's next claims take the one-lane path.
    assert ran == ["lone", "merged", "merged"]
    assert QUEUE not in engine._parts.claims._several
    (later,) = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, priority=3)])
    assert [c.job.id for c in await engine.claim(QUEUE, limit=1)] == [later.id]
    assert ran == ["lone", "merged", "merged", "lone"]


async def test_a_sorted_window_falls_back_to_the_merged_claim(
    engine: QueueStorageEngine, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _learn_the_slot(engine)
    behind = await QueueStorageEngine.open(
        migrated_database_url, clock=_Behind(), backoff=Backoff(), schema=SCHEMA
    )
    try:
        ran = _record(engine, monkeypatch)
        first = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
        # Appended after, but older: the lane's window is no longer in lane order.
        late = await behind.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    finally:
        await behind.close()
    claims = await engine.claim(QUEUE, limit=8)
    assert [c.job.id for c in claims] == [job.id for job in late + first]
    assert ran == ["lone", "merged"]


async def test_a_keyed_lane_with_rows_leaves_the_claim_to_the_merged_statement(
    engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keyed lanes (a concurrency key's own) are claimed through claim_in_slot's window of
    # keys: the one-lane statement, which reads keyless lanes only, leaves them to it and
    # claims nothing, so no job it locked is taken twice or lost.
    await _learn_the_slot(engine)
    ran = _record(engine, monkeypatch)
    plain = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    keyed = await engine.enqueue_many(
        [
            JobSpec(kind="k", queue=QUEUE, metadata={CONCURRENCY_KEY_METADATA: "tenant"})
            for _ in range(2)
        ]
    )
    claimed = [c.job.id for c in await engine.claim(QUEUE, limit=8)]
    assert sorted(claimed) == sorted(job.id for job in plain + keyed)
    assert ran == ["lone", "merged"]
    # The merged claim locked two lanes (one keyed): the queue stays with it.
    assert QUEUE in engine._parts.claims._several
