"""Claimers racing on sorted lane windows never take the same job twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_claim_race"
QUEUE = "race"
ENOUGH = 300


class _Behind(SystemClock):
    """A producer whose clock runs 5 s late: its jobs land behind the lane's tail, so
    the lane's window must be sorted (claim_sorted)."""

    def now(self) -> datetime:
        return super().now() - timedelta(seconds=5)


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


@pytest.mark.parametrize(
    "limits", [(3, 3, 3, 3), (3, 64, 3, 64)], ids=["sorted", "sorted-and-whole"]
)
async def test_claimers_of_sorted_windows_never_take_a_job_twice(
    engine: QueueStorageEngine, migrated_database_url: str, limits: tuple[int, ...]
) -> None:
    """A sorted window does not move its cursor past the rows taken, so a claimer whose
    snapshot predates another claimer's commit (taken just before it got the lane's
    lock) used to claim the same rows again: about 5 % of jobs ran twice with four
    claimers. The claim now checks under its locks and starts over, and marks the lane,
    so a claim that takes a short sorted window whole (the larger batches) leaves a lane
    alone whose sorted claim committed after its snapshot."""
    opened = [
        await QueueStorageEngine.open(
            migrated_database_url, clock=clock, backoff=Backoff(), schema=SCHEMA
        )
        for clock in (_Behind(), SystemClock(), SystemClock(), SystemClock())
    ]
    behind, *claimers = opened
    # The race needs a few hundred contested claims, however fast the host runs them; the
    # cap only keeps a broken claim path from spinning forever.
    cap = time.monotonic() + 60.0
    claimed: Counter[int] = Counter()

    def running() -> bool:
        return len(claimed) < ENOUGH and time.monotonic() < cap

    async def produce(producer: QueueStorageEngine) -> None:
        while running():
            await producer.enqueue_many([JobSpec(kind="r", queue=QUEUE) for _ in range(8)])
            await asyncio.sleep(0.002)  # paces the producer over the race; nothing waits on it

    async def claim(claimer: QueueStorageEngine, limit: int) -> None:
        while running():
            got = await claimer.claim(QUEUE, limit=limit)
            claimed.update(c.job.id for c in got)
            if got:
                await claimer.complete([c.lease for c in got])
            else:
                await asyncio.sleep(0.001)  # an idle claimer's poll, as a worker's would be

    try:
        await asyncio.gather(
            produce(engine),
            produce(behind),
            *(claim(c, n) for c, n in zip((engine, *claimers), limits, strict=True)),
        )
    finally:
        for other in opened:
            await other.close()
    with psycopg.connect(migrated_database_url) as conn:
        twice = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {SCHEMA}.claims "
            "GROUP BY slot, ready_fact HAVING count(*) > 1) d"
        ).fetchone()
        sorted_windows = conn.execute(
            f"SELECT count(*) FROM {SCHEMA}.lanes WHERE disorder_seq IS NOT NULL "
            "AND disorder_seq >= 0"
        ).fetchone()
    assert len(claimed) >= ENOUGH
    assert sorted_windows is not None and sorted_windows[0] > 0
    assert [job for job, n in claimed.items() if n > 1] == []
    assert twice == (0,)
