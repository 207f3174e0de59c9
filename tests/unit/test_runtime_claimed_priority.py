"""The handler sees the claimed attempt's effective priority (after aging)."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.runtime import AttemptContext, HandlerRegistry
from tests.unit.test_runtime_support import enqueue, fast_config, job, make_engine, running, within

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("aging_ms", "waited", "seen"),
    [
        (60_000, timedelta(minutes=10), 1),  # aged all the way up, never below 1
        (60_000, timedelta(seconds=90), 3),  # one interval waited: one level better
        (0, timedelta(hours=1), 4),  # aging disabled: the stored priority
    ],
)
async def test_the_handler_sees_the_effective_priority(
    aging_ms: int, waited: timedelta, seen: int
) -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    (stored,) = await enqueue(engine, "aged", priority=4)
    clock.advance(waited)
    priorities: list[int] = []
    handled = anyio.Event()

    async def handler(ctx: AttemptContext) -> None:
        priorities.append(ctx.record.priority)
        handled.set()

    handlers = HandlerRegistry()
    handlers.register("aged", handler)
    queues = [{"name": "default", "max_workers": 1, "priority_aging_interval_ms": aging_ms}]
    async with running(engine, handlers, fast_config(handlers, queues)):
        with within(5):
            await handled.wait()
    assert priorities == [seen]
    # What is stored does not change: aging orders claims, it does not rewrite the job.
    assert (await job(engine, stored.id)).priority == 4
