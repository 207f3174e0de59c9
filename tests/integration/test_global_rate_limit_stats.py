"""``queue_stats`` on a real database says how many available jobs a queue's fleet-wide
rate limit holds back right now (ADR 0029)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from awa import AsyncClient, Job

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Paced:
    n: int


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


async def test_queue_stats_count_the_jobs_the_rate_limit_holds_back(client: AsyncClient) -> None:
    two_ran = asyncio.Event()
    ran: list[int] = []

    @client.task(Paced, queue="paced")
    async def paced(job: Job[Paced]) -> None:
        ran.append(job.args.n)
        if len(ran) == 2:
            two_ran.set()

    for n in range(10):
        await client.insert(Paced(n), queue="paced")
    # A burst of 2, then one job every 1,000 s: the other 8 wait for the limiter.
    await client.start([{"name": "paced", "max_workers": 4, "global_rate_limit": (0.001, 2)}])
    try:
        await asyncio.wait_for(two_ran.wait(), timeout=60)
        (stat,) = [s for s in await client.queue_stats() if s.queue == "paced"]
        assert stat.available == 8
        assert stat.rate_limited == 8
    finally:
        await client.shutdown()
    assert len(ran) == 2
