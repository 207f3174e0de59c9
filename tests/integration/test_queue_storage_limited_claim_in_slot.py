"""A claim under ``max_running_per_key`` counts and claims in the ring slot where the
queue's last claims found their rows (ADR 0029, "Amended 2026-12-06 (night)"): the count
(``live_of_walk_in_slot``) and the claim (``claim_limited_in_slot``) read that slot's
partitions by name, one probe per lane instead of one per ring partition, and read the
whole ring only for a lane whose rows are not all there, so the limit and each lane's
order are those of the ring-wide statements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.claim import _KEYED_BASE, _NO_KEY, claim_parameters
from awa.adapters.postgres_queue_storage.statements import run
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.job import JobSpec
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_limited_slot"
QUEUE = "limited_slot"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


def _keyed(key: str) -> JobSpec:
    return JobSpec(kind="k", queue=QUEUE, args={}, metadata={CONCURRENCY_KEY_METADATA: key})


def _current_slot(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT current_slot FROM {SCHEMA}.ring_state").fetchone()
    assert row is not None
    return int(row[0])


def _ready_partitions_read(node: dict[str, Any]) -> set[str]:
    """The partitions of ready_entries an EXPLAIN ANALYZE plan (JSON) ran a scan of."""
    found: set[str] = set()
    name = node.get("Relation Name", "")
    if name.startswith("ready_entries_") and node.get("Actual Loops", 0) > 0:
        found.add(name)
    for child in node.get("Plans", ()):
        found |= _ready_partitions_read(child)
    return found


async def _explained(
    conn: psycopg.AsyncConnection[dict[str, Any]], statement: bytes, params: dict[str, Any]
) -> tuple[set[str], dict[str, Any]]:
    """The ready_entries partitions ``statement`` scanned, run under EXPLAIN ANALYZE."""
    cur = await run(conn, b"EXPLAIN (ANALYZE, FORMAT JSON)\n" + statement, params)
    row = await cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"][0]["Plan"]
    return _ready_partitions_read(plan), plan


async def test_the_count_and_the_claim_read_only_the_slot_the_rows_are_in(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([_keyed(f"tenant-{i}") for i in range(3) for _ in range(2)])
    # The first claim reads the whole ring and learns the rows' slot: each key's first job.
    assert len(await engine.claim(QUEUE, limit=3, max_running_per_key=2)) == 3
    slot = _current_slot(migrated_database_url)
    assert engine._parts.claims._slots[QUEUE] == slot
    sql = engine._parts.statements
    count = {
        "queue": QUEUE,
        "per_key": 2,
        "limit": 3,
        "marks": "{}",
    }
    walk = {
        "queue": QUEUE,
        "keyed_base": _KEYED_BASE,
        "key_after": _NO_KEY,
        "walked": [],
        "limit": 3,
    }
    conn = await psycopg.AsyncConnection.connect(migrated_database_url, row_factory=dict_row)
    try:
        async with conn.transaction(force_rollback=True):
            await run(conn, sql["keyed_lanes_locked"], walk)
            # Over the whole ring, each lane is a probe of every ring partition.
            ring, _ = await _explained(conn, sql["live_of_walk"], count)
            assert len(ring) > 1, ring
            # In the slot, of that slot's partition alone: every lane's rows are there.
            read, _ = await _explained(conn, sql.in_slot("live_of_walk", slot), count)
            assert read == {f"ready_entries_{slot}"}
            cur = await run(conn, sql.in_slot("live_of_walk", slot), count)
            lanes = [r for r in await cur.fetchall() if r["shard"] is not None]
            # Each key has its first job running and room for one more.
            assert len(lanes) == 3 and all(r["live"] == 1 for r in lanes), lanes
            params = claim_parameters(QUEUE, 3, engine._parts.claims._clock.now())
            read, plan = await _explained(conn, sql.in_slot("claim_limited", slot), params)
            assert read == {f"ready_entries_{slot}"}
            assert plan["Actual Rows"] == 3  # each key's second job
    finally:
        await conn.close()


async def test_a_running_attempt_in_another_slot_still_holds_its_key(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The claim counts in the slot it names, and over the ring for a lane whose rows are
    not all there: a key's attempt running from an older slot keeps its slot."""
    [first] = await engine.enqueue_many([_keyed("tenant-0")])
    [claimed] = await engine.claim(QUEUE, limit=1, max_running_per_key=1)
    assert claimed.job.id == first.id
    assert await engine.rotate_queue_ring() == "rotated"
    await engine.enqueue_many([_keyed("tenant-0")])
    engine._parts.claims._slots[QUEUE] = _current_slot(migrated_database_url)
    assert await engine.claim(QUEUE, limit=1, max_running_per_key=1) == []


async def test_a_lane_across_two_slots_is_claimed_in_order_under_a_limit(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A lane whose first rows are in an older slot than the one the claim names is
    walked over the ring: its rows are taken in lane order, none skipped."""
    older = await engine.enqueue_many([_keyed("tenant-0") for _ in range(2)])
    assert await engine.rotate_queue_ring() == "rotated"
    newer = await engine.enqueue_many([_keyed("tenant-0")])
    engine._parts.claims._slots[QUEUE] = _current_slot(migrated_database_url)
    claims = await engine.claim(QUEUE, limit=3, max_running_per_key=3)
    assert [c.job.id for c in claims] == [job.id for job in [*older, *newer]]
