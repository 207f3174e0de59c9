"""The deadline stops the handler where it runs (awa.runtime.deadlines).

No maintenance leader runs here (``leader=False``), so nothing but the runtime's own
deadline watch can end an attempt that outlives ``deadline_duration_ms``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import pytest

from awa.domain.lifecycle import Rescue
from awa.domain.states import JobState
from awa.runtime import AttemptContext, HandlerRegistry
from awa.runtime.deadlines import SYNC_DEADLINE_GRACE
from tests.support.waits import until
from tests.unit.test_runtime_support import (
    clock_of,
    enqueue,
    fast_config,
    job,
    make_engine,
    running,
    wait_until,
    within,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

#: One handler slot: a stopped attempt must give it back for the next job to run.
_ONE_SLOT = [{"name": "default", "max_workers": 1, "deadline_duration_ms": 1000}]


def _retried_at_deadline(record: Any) -> bool:
    return (
        record.state == JobState.Retryable
        and bool(record.errors)
        and record.errors[-1]["error"] == Rescue.DEADLINE_EXCEEDED.error
    )


async def test_an_async_handler_is_cancelled_at_its_deadline_and_its_slot_runs_the_next_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = make_engine()
    clock = clock_of(engine)
    handlers = HandlerRegistry()
    cancelled_at: list[float] = []
    ran: list[int] = []

    async def stuck(ctx: AttemptContext) -> None:
        started = clock.monotonic()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled_at.append(clock.monotonic() - started)
            raise

    async def quick(ctx: AttemptContext) -> None:
        ran.append(ctx.record.id)

    handlers.register("stuck", stuck)
    handlers.register("quick", quick)
    config = fast_config(handlers, _ONE_SLOT)
    with caplog.at_level(logging.WARNING, logger="awa.runtime.executor"):
        async with running(engine, handlers, config, leader=False):
            [stuck_job] = await enqueue(engine, "stuck")
            [quick_job] = await enqueue(engine, "quick")
            await wait_until(lambda: ran, timeout=5.0)
            record = await job(engine, stuck_job.id)
    assert _retried_at_deadline(record)
    assert record.attempt == 1
    assert ran == [quick_job.id]
    # Cut off at the deadline, not at the first poll or heartbeat after it.
    assert cancelled_at and 1.0 <= cancelled_at[0] < 1.05
    assert any("cancelled at its deadline" in r.getMessage() for r in caplog.records)


async def test_a_sync_handler_is_told_at_its_deadline_and_may_return() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    began = threading.Event()
    observed = threading.Event()

    def polite(ctx: AttemptContext) -> str:
        began.set()
        # Works in small steps and looks at the flag between them.
        while not ctx.is_cancelled():
            observed.wait(0.001)
        observed.set()
        return "stopped early"

    handlers.register("polite", polite)
    config = fast_config(handlers, _ONE_SLOT)
    # The clock stands still while the handler's thread works, and the test moves it to
    # the deadline: the grace cannot run out before the thread has had its turn.
    async with running(engine, handlers, config, leader=False):
        [record] = await enqueue(engine, "polite")
        await until(began.is_set, "the handler started")
        clock_of(engine).advance(1.0)
        await until(observed.is_set, "the handler saw its deadline")
        await wait_until(lambda: _finished(engine, record.id), timeout=5.0)
    # It returned within its grace: its own outcome stands.
    assert (await job(engine, record.id)).state == JobState.Completed


async def test_a_sync_handler_that_ignores_its_deadline_is_abandoned_after_the_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = make_engine()
    clock = clock_of(engine)
    handlers = HandlerRegistry()
    release = threading.Event()
    told = threading.Event()
    ran: list[int] = []

    def stubborn(ctx: AttemptContext) -> None:
        while not release.wait(0.001):
            if ctx.is_cancelled():
                told.set()

    async def quick(ctx: AttemptContext) -> None:
        ran.append(ctx.record.id)

    handlers.register("stubborn", stubborn)
    handlers.register("quick", quick)
    config = fast_config(handlers, _ONE_SLOT)
    try:
        with caplog.at_level(logging.WARNING, logger="awa.runtime.executor"):
            async with running(
                engine, handlers, config, leader=False, clock_waits_for_threads=False
            ):
                started = clock.monotonic()
                [stuck_job] = await enqueue(engine, "stubborn")
                [quick_job] = await enqueue(engine, "quick")
                await wait_until(lambda: ran, timeout=SYNC_DEADLINE_GRACE + 5.0)
                elapsed = clock.monotonic() - started
                record = await job(engine, stuck_job.id)
    finally:
        release.set()
    assert told.is_set()
    assert _retried_at_deadline(record)
    assert ran == [quick_job.id]
    assert elapsed >= 1.0 + SYNC_DEADLINE_GRACE
    assert any("its thread is abandoned" in r.getMessage() for r in caplog.records)


async def test_an_attempt_without_a_deadline_is_never_cut_off() -> None:
    engine = make_engine()
    clock = clock_of(engine)
    handlers = HandlerRegistry()
    finished = anyio.Event()

    async def long(ctx: AttemptContext) -> None:
        await clock.sleep(10)
        finished.set()

    handlers.register("long", long)
    queues = [{"name": "default", "max_workers": 1, "deadline_duration_ms": 0}]
    config = fast_config(handlers, queues)
    async with running(engine, handlers, config, leader=False):
        [record] = await enqueue(engine, "long")
        with within(20):  # twice the handler's 10 s of the clock
            await finished.wait()
        await wait_until(lambda: _finished(engine, record.id))
    assert (await job(engine, record.id)).state == JobState.Completed


async def _finished(engine: Any, job_id: int) -> bool:
    return (await job(engine, job_id)).state in (JobState.Completed, JobState.Retryable)
