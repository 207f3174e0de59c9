"""``queue_stats`` counts the jobs a queue's fleet-wide rate limit holds back under the
limit in force now (ADR 0029): an operator's override (``awa queue overrides``) as soon
as it is set, else the live workers' ``global_rate_limit``; not the limit the limiter
row was last claimed under, and nothing when no limit is in force."""

from __future__ import annotations

import pytest

import awa
from awa.domain.rate_limits import GlobalRateLimit
from awa.ports.runtime_registry import QueueSnapshot
from awa.testing import memory_client
from tests.unit.test_job_held_back import _worker

pytestmark = pytest.mark.anyio


async def _held(client: awa.AsyncClient) -> tuple[int, int]:
    (stat,) = [s for s in await client.queue_stats() if s.queue == "paced"]
    return stat.available, stat.rate_limited


async def test_rate_limited_follows_the_limit_in_force() -> None:
    client = memory_client()
    for n in range(7):
        await client.insert({"n": n}, kind="paced_call", queue="paced")
    engine = await client.admin_engine()
    # A burst of 2, then a job every 1,000 s: the limiter is spent for 1,000 s.
    claimed = await engine.claim(
        "paced", limit=7, global_rate_limit=GlobalRateLimit(rate=0.001, burst=2)
    )
    assert len(claimed) == 2

    # No override and no live worker: no limit in force holds anything back.
    assert await _held(client) == (5, 0)

    await client.set_queue_overrides("paced", global_rate_limit=0.001, global_rate_burst=2)
    assert await _held(client) == (5, 5)
    # An override raising the limit counts at once (the row still says 0.001/s, burst 2).
    await client.set_queue_overrides("paced", global_rate_limit=1.0, global_rate_burst=10_000)
    assert await _held(client) == (5, 0)

    # Without an override, the live workers' limit is the one in force.
    await client.set_queue_overrides("paced")
    queue = QueueSnapshot(
        name="paced",
        in_flight=2,
        max_workers=4,
        min_workers=None,
        weight=None,
        global_rate_per_second=0.001,
        global_rate_burst=2,
    )
    registry = await client.runtime_registry()
    await registry.upsert_runtime(_worker(queue))
    assert await _held(client) == (5, 5)
    # ... as long as that worker is live: one shutting down sets no limit.
    await registry.upsert_runtime(_worker(queue, shutting_down=True))
    assert await _held(client) == (5, 0)
