"""Lane windows appended out of (run_at, job id) order ("sorted windows"): the common
claim takes a short one whole, in claim order; one with a row not yet due, or longer
than the batch, goes to the general claim; nothing is skipped or taken twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_sorted_windows"
QUEUE = "sorted"


class _Shifted(SystemClock):
    def __init__(self, seconds: float) -> None:
        self._shift = timedelta(seconds=seconds)

    def now(self) -> datetime:
        return super().now() + self._shift


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


@pytest.fixture
async def shifted(migrated_database_url: str) -> AsyncIterator[dict[float, QueueStorageEngine]]:
    """Engines on the same schema whose clocks run the given seconds off."""
    opened: dict[float, QueueStorageEngine] = {}
    for seconds in (-5.0, 10.0, 20.0):
        opened[seconds] = await QueueStorageEngine.open(
            migrated_database_url, clock=_Shifted(seconds), backoff=Backoff(), schema=SCHEMA
        )
    try:
        yield opened
    finally:
        for other in opened.values():
            await other.close()


async def _enqueue(engine: QueueStorageEngine, n: int) -> list[int]:
    jobs = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(n)])
    return [job.id for job in jobs]


async def test_a_short_sorted_window_is_claimed_whole_in_claim_order(
    engine: QueueStorageEngine, shifted: dict[float, QueueStorageEngine]
) -> None:
    first = await _enqueue(engine, 3)
    behind = await _enqueue(shifted[-5.0], 3)
    claims = await engine.claim(QUEUE, limit=64)
    # The late producer's jobs sort first (older run_at), though appended after.
    assert [c.job.id for c in claims] == behind + first
    assert QUEUE not in engine._parts.claims._sorting
    assert await engine.claim(QUEUE, limit=64) == []
    # The cursor moved past the window: later jobs come next, nothing is seen twice.
    later = await _enqueue(engine, 2)
    assert [c.job.id for c in await engine.claim(QUEUE, limit=64)] == later


async def test_a_sorted_window_with_a_row_not_yet_due_keeps_it(
    engine: QueueStorageEngine, shifted: dict[float, QueueStorageEngine]
) -> None:
    ahead = await _enqueue(shifted[10.0], 2)
    due = await _enqueue(engine, 2)
    claims = await engine.claim(QUEUE, limit=64)
    assert [c.job.id for c in claims] == due
    assert QUEUE not in engine._parts.claims._sorting
    assert await engine.claim(QUEUE, limit=64) == []
    # Once due (a claimer whose clock is past their run_at), the skipped rows are there.
    assert [c.job.id for c in await shifted[20.0].claim(QUEUE, limit=64)] == ahead


async def test_a_sorted_window_longer_than_the_batch_takes_the_best_rows(
    engine: QueueStorageEngine, shifted: dict[float, QueueStorageEngine]
) -> None:
    first = await _enqueue(engine, 4)
    behind = await _enqueue(shifted[-5.0], 4)
    taken = [c.job.id for c in await engine.claim(QUEUE, limit=3)]
    assert taken == behind[:3]
    assert QUEUE in engine._parts.claims._sorting
    taken += [c.job.id for c in await engine.claim(QUEUE, limit=3)]
    assert taken == behind + first[:2]
    taken += [c.job.id for c in await engine.claim(QUEUE, limit=3)]
    assert taken == behind + first
    assert await engine.claim(QUEUE, limit=3) == []
    # The window is used up: the common claim serves the queue again.
    assert QUEUE not in engine._parts.claims._sorting
