"""Keyed lanes claimed without a per-key limit on queue storage (ADR 0029, "Keyed lanes
without a limit"): each concurrency key is a lane of its own, and a claim without a limit
visits every keyless lane but only a window of keyed lanes the size of its batch, which
rotates from claim to claim; within the window the merge keeps the global order, and each
lane is taken in lane order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest

from awa.adapters._pg import transition
from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, concurrency_key_of
from awa.domain.job import Claim, JobRecord, JobSpec
from awa.ports.storage import Ack
from tests.support.engines import CONTRACT_BACKOFF

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "keyed"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=ManualClock(T0), backoff=CONTRACT_BACKOFF
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _keyed(
    engine: QueueStorageEngine, keys: list[str], per_key: int, priority: int = 2
) -> list[JobRecord]:
    """``per_key`` jobs of each key, every key's first before any key's second."""
    specs = [
        JobSpec(
            kind="k",
            queue=QUEUE,
            priority=priority,
            args={"n": n},
            metadata={CONCURRENCY_KEY_METADATA: key},
        )
        for n in range(per_key)
        for key in keys
    ]
    return await engine.enqueue_many(specs)


def _keys(claims: list[Claim]) -> list[str | None]:
    return [concurrency_key_of(c.job.metadata) for c in claims]


async def test_a_claim_without_a_limit_rotates_among_keys(engine: QueueStorageEngine) -> None:
    keys = [f"tenant-{n}" for n in range(6)]
    # Each key's jobs in a run: a claim in queue order over every lane would take the
    # first key's three, then the second's.
    specs = [
        JobSpec(kind="k", queue=QUEUE, args={"n": n}, metadata={CONCURRENCY_KEY_METADATA: key})
        for key in keys
        for n in range(3)
    ]
    await engine.enqueue_many(specs)
    taken: list[Claim] = []
    for _ in range(3):
        got = await engine.claim(QUEUE, limit=2)
        assert len(got) == 2
        taken += got
    # Three claims of two: each a window of two keys merged in queue order (the older
    # key's run first), the rotation moving on, so three windows' keys had a turn where a
    # claim in queue order over every lane takes the first key's three, then the second's.
    per_key: dict[str | None, list[int]] = defaultdict(list)
    for claim in taken:
        per_key[concurrency_key_of(claim.job.metadata)].append(claim.job.args["n"])
    assert len(per_key) >= 3, per_key
    # Each key's jobs in lane order from its first.
    assert all(ns == list(range(len(ns))) for ns in per_key.values()), per_key


async def test_every_key_drains_in_lane_order_without_a_limit(engine: QueueStorageEngine) -> None:
    keys = [f"tenant-{n}" for n in range(40)]
    jobs = await _keyed(engine, keys, 4)
    plain = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(5)])
    by_key: dict[str | None, list[int]] = defaultdict(list)
    for limit in [7, 3, 16, 1] * 100:
        got = await engine.claim(QUEUE, limit=limit)
        if not got:
            break
        for claim in got:
            by_key[concurrency_key_of(claim.job.metadata)].append(claim.job.id)
    expected: dict[str | None, list[int]] = defaultdict(list)
    for job in [*jobs, *plain]:
        expected[concurrency_key_of(job.metadata)].append(job.id)
    assert by_key == expected


async def test_keyless_work_of_a_better_priority_goes_first(engine: QueueStorageEngine) -> None:
    await _keyed(engine, [f"tenant-{n}" for n in range(30)], 2, priority=3)
    urgent = await engine.enqueue_many(
        [JobSpec(kind="k", queue=QUEUE, priority=1) for _ in range(3)]
    )
    got = await engine.claim(QUEUE, limit=4)
    assert [c.job.id for c in got[:3]] == [j.id for j in urgent]
    assert _keys(got[3:]) != [None]


async def test_a_window_of_keys_is_merged_in_priority_order(engine: QueueStorageEngine) -> None:
    # Two keys, a claim of two: the window holds both keys, and their jobs come in the
    # global order (priority first), not one from each.
    low = await _keyed(engine, ["a"], 2, priority=4)
    high = await _keyed(engine, ["b"], 2, priority=1)
    got = await engine.claim(QUEUE, limit=2)
    assert [c.job.id for c in got] == [j.id for j in high]
    assert [c.job.id for c in await engine.claim(QUEUE, limit=2)] == [j.id for j in low]


async def test_the_window_moves_on_past_keys_with_nothing_due(
    engine: QueueStorageEngine,
) -> None:
    # A window is the next keys with rows past their cursor; a later claim starts after
    # the last of them, so keys beyond the first window are reached though the window's
    # keys still have work.
    keys = [f"tenant-{n}" for n in range(8)]
    await _keyed(engine, keys, 5)
    seen: set[str | None] = set()
    for _ in range(4):
        seen.update(_keys(await engine.claim(QUEUE, limit=2)))
    assert seen == set(keys)


async def test_the_count_from_a_lanes_mark_still_sees_an_old_attempt(
    engine: QueueStorageEngine,
) -> None:
    # Under a limit of two the key's first attempt stays open while the jobs after it are
    # claimed and completed one by one: each count starts at the lane's low-water mark,
    # which stays at that first attempt, so the key never runs more than two.
    jobs = await _keyed(engine, ["a"], 8)
    (first, second) = await engine.claim(QUEUE, limit=5, max_running_per_key=2)
    assert [first.job.id, second.job.id] == [jobs[0].id, jobs[1].id]
    held = second
    for job in jobs[2:]:
        assert await engine.complete([held.lease]) == [Ack.APPLIED]
        (held,) = await engine.claim(QUEUE, limit=5, max_running_per_key=2)
        assert held.job.id == job.id
        assert await engine.claim(QUEUE, limit=5, max_running_per_key=2) == []
    assert await engine.complete([first.lease]) == [Ack.APPLIED]
    assert await engine.claim(QUEUE, limit=5, max_running_per_key=2) == []
