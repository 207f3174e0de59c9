"""A runtime under a fleet-wide rate limit (on the in-memory engine's manual clock): two
runtimes sharing one store start jobs no faster than the queue's ``global_rate_limit``
together, count what the limit held back in ``awa.job.rate_limited`` (and what a key's
limit held back in ``awa.job.concurrency_limited``), and a handler's
``Snooze(until=...)`` spends no attempt."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from awa.adapters.inmemory import InMemoryEngine
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.handler_results import Snooze
from awa.domain.states import JobState
from awa.runtime import AttemptContext, HandlerRegistry, metrics
from tests.unit.test_runtime_support import (
    clock_of,
    enqueue,
    fast_config,
    job,
    make_engine,
    running,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _queue_counter(name: str, queue: str) -> int:
    instruments = metrics.instruments()
    assert instruments is not None
    return instruments.counter_value(name, {metrics.ATTR_QUEUE: queue})


async def test_two_runtimes_share_the_fleet_rate() -> None:
    engine = make_engine()
    # A second engine on the same store stands for a second worker process.
    other = InMemoryEngine(clock=clock_of(engine), backoff=engine._backoff, store=engine._store)
    clock = clock_of(engine)
    started: list[datetime] = []
    handlers = HandlerRegistry()

    async def work(ctx: AttemptContext) -> None:
        started.append(clock.now())

    handlers.register("paced", work, queue="paced")
    config = fast_config(
        handlers, queues=[{"name": "paced", "max_workers": 8, "global_rate_limit": (10, 2)}]
    )
    before = _queue_counter("awa.job.rate_limited", "paced")
    async with running(engine, handlers, config), running(other, handlers, config, leader=False):
        await enqueue(engine, "paced", 22, queue="paced")
        await wait_until(lambda: len(started) == 22, timeout=10)
    started.sort()
    # 2 at once, then one each 0.1 s: the 22nd no sooner than 2 s after the first.
    assert started[-1] - started[0] >= timedelta(seconds=2)
    for i, first in enumerate(started):
        for j in range(i, len(started)):
            window = (started[j] - first).total_seconds()
            assert j - i + 1 <= 2 + 10 * window + 1e-9
    assert _queue_counter("awa.job.rate_limited", "paced") > before


async def test_a_key_at_its_limit_is_counted() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    release: list[int] = []

    async def slow(ctx: AttemptContext) -> None:
        await wait_until(lambda: release, timeout=30)

    handlers.register("keyed", slow, queue="keyed")
    config = fast_config(
        handlers, queues=[{"name": "keyed", "max_workers": 4, "max_running_per_key": 1}]
    )
    before = _queue_counter("awa.job.concurrency_limited", "keyed")
    async with running(engine, handlers, config):
        await enqueue(
            engine, "keyed", 3, queue="keyed", metadata={CONCURRENCY_KEY_METADATA: "tenant"}
        )
        await wait_until(lambda: _queue_counter("awa.job.concurrency_limited", "keyed") > before)
        release.append(1)


async def test_snooze_until_spends_no_attempt() -> None:
    engine = make_engine()
    clock = clock_of(engine)
    handlers = HandlerRegistry()
    reset_at: list[datetime] = []

    async def limited(ctx: AttemptContext) -> Snooze | None:
        if not reset_at:
            # A short snooze: every poll, heartbeat and duty tick until it ends is a step
            # of the simulated clock (30 s of them took 10 s of a busy host).
            reset_at.append(clock.now() + timedelta(seconds=2))
            return Snooze(until=reset_at[0])
        return None

    handlers.register("api_call", limited)
    async with running(engine, handlers):
        (record,) = await enqueue(engine, "api_call", max_attempts=1)

        async def snoozed() -> bool:
            return (await job(engine, record.id)).state is JobState.Scheduled

        await wait_until(snoozed)
        held = await job(engine, record.id)
        # No attempt spent: with max_attempts=1 it will still run.
        assert held.attempt == 0
        assert held.run_at == reset_at[0]
        assert held.errors == ()

        async def done() -> bool:
            return (await job(engine, record.id)).state is JobState.Completed

        await wait_until(done, timeout=10)
    assert (await job(engine, record.id)).attempt == 1
    assert clock.now() >= reset_at[0]
