"""A dispatcher configured with stripes claims one stripe per claim, rotating, and is
woken by every stripe's channel; engines without stripes claim the logical queue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.job import Claim, JobSpec
from awa.domain.policies import NO_JITTER
from awa.domain.stripes import stripe_queues
from awa.ports.storage import StripedClaimer
from awa.runtime import AttemptContext, HandlerRegistry
from tests.unit.test_runtime_support import fast_config, running, sleep, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class StripedEngine(InMemoryEngine):
    """The in-memory engine plus the stripe mapping the Postgres routing engine applies."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.stripe_calls: list[tuple[str, int]] = []

    async def claim_stripe(
        self,
        queue: str,
        stripe: int,
        stripes: int,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        self.stripe_calls.append((queue, stripe))
        physical = stripe_queues(queue, stripes)[stripe]
        return await self.claim(
            physical, limit=limit, deadline=deadline, aging_interval=aging_interval
        )


def _recording(seen: list[tuple[str, int]]) -> Any:
    async def handler(ctx: AttemptContext) -> None:
        seen.append((ctx.record.queue, ctx.record.args["n"]))

    return handler


async def test_a_striped_queue_drains_every_stripe_and_keeps_one_permit_pool() -> None:
    engine = StripedEngine()
    assert isinstance(engine, StripedClaimer)
    handlers = HandlerRegistry()
    seen: list[tuple[str, int]] = []
    handlers.register("k", _recording(seen), queue="q")
    specs = [JobSpec(kind="k", queue=f"q#{i % 3}", args={"n": i}) for i in range(30)]
    await engine.enqueue_many(specs)
    config = fast_config(handlers, [("q", 2)], queue_storage_queue_stripe_count=3)
    async with running(engine, handlers, config, leader=False) as runtime:
        await wait_until(lambda: len(seen) == 30)
        health = runtime.health()
        assert set(health.queues) == {"q"}
        assert health.queues["q"].max_workers == 2
    assert sorted(n for _, n in seen) == list(range(30))
    assert {queue for queue, _ in seen} == {"q#0", "q#1", "q#2"}
    stripes = [stripe for _, stripe in engine.stripe_calls]
    assert {queue for queue, _ in engine.stripe_calls} == {"q"}
    # Round robin: every run of three consecutive claims visits each stripe once.
    assert stripes[:6] == [0, 1, 2, 0, 1, 2]


async def test_a_striped_queue_is_woken_by_every_stripe_channel() -> None:
    engine = StripedEngine()
    handlers = HandlerRegistry()
    seen: list[tuple[str, int]] = []
    handlers.register("k", _recording(seen), queue="q")
    # Polling alone would take a minute: only notifications can deliver these in time.
    config = fast_config(
        handlers, [("q", 4)], queue_storage_queue_stripe_count=2, poll_interval_ms=60_000
    )
    async with running(engine, handlers, config, leader=False):
        await sleep(0.05)
        await engine.enqueue_many([JobSpec(kind="k", queue="q#1", args={"n": 1})])
        await wait_until(lambda: len(seen) == 1)
        await engine.enqueue_many([JobSpec(kind="k", queue="q#0", args={"n": 0})])
        await wait_until(lambda: len(seen) == 2)
    assert sorted(seen) == [("q#0", 0), ("q#1", 1)]


async def test_an_engine_without_stripes_claims_the_logical_queue() -> None:
    engine = InMemoryEngine(clock=ManualClock(), backoff=NO_JITTER)
    assert not isinstance(engine, StripedClaimer)
    handlers = HandlerRegistry()
    seen: list[tuple[str, int]] = []
    handlers.register("k", _recording(seen), queue="q")
    await engine.enqueue_many([JobSpec(kind="k", queue="q", args={"n": i}) for i in range(4)])
    config = fast_config(handlers, [("q", 2)], queue_storage_queue_stripe_count=4)
    async with running(engine, handlers, config, leader=False):
        await wait_until(lambda: len(seen) == 4)
    assert {queue for queue, _ in seen} == {"q"}


async def test_the_rate_limit_and_weighted_share_belong_to_the_logical_queue() -> None:
    engine = StripedEngine()
    handlers = HandlerRegistry()
    seen: list[tuple[str, int]] = []
    handlers.register("k", _recording(seen), queue="q")
    handlers.register("k2", _recording(seen), queue="other")
    specs = [JobSpec(kind="k", queue=f"q#{i % 3}", args={"n": i}) for i in range(9)]
    await engine.enqueue_many(specs)
    # A burst of 3 and almost no refill: one bucket for all three stripes lets 3 jobs run.
    config = fast_config(
        handlers,
        [
            {"name": "q", "min_workers": 1, "weight": 2, "rate_limit": (0.001, 3)},
            {"name": "other", "min_workers": 1},
        ],
        global_max_workers=4,
        queue_storage_queue_stripe_count=3,
    )
    async with running(engine, handlers, config, leader=False) as runtime:
        await wait_until(lambda: len(seen) == 3)
        await sleep(0.3)
        assert set(runtime.health().queues) == {"q", "other"}
    assert len(seen) == 3
