"""Handlers that raise what ``except Exception`` does not catch, or misbehave otherwise.

Each is that job's failed attempt (an error entry with the type and message); the runtime
stays healthy and runs the next job. A cancellation the runtime delivers (shutdown, an
operator's cancel) still releases or cancels the attempt as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from awa.domain.states import JobState
from awa.runtime import AttemptContext, HandlerRegistry
from tests.unit.test_runtime_support import enqueue, job, make_engine, running, sleep, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class Custom(BaseException):
    """A BaseException of the user's own."""


async def _cancelled_future() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


def _raiser(exc: BaseException) -> Any:
    def raise_it() -> None:
        raise exc

    return raise_it


RAISED = [
    ("CancelledError", lambda: _raiser(asyncio.CancelledError("handler gave up"))),
    ("KeyboardInterrupt", lambda: _raiser(KeyboardInterrupt("ctrl-c in a handler"))),
    ("SystemExit", lambda: _raiser(SystemExit(3))),
    ("GeneratorExit", lambda: _raiser(GeneratorExit("closed"))),
    ("Custom", lambda: _raiser(Custom("mine"))),
]


async def _run(handler: Any, *, count: int = 1) -> tuple[Any, list[Any], Any]:
    """Run ``count`` jobs of kind ``bad`` and one of kind ``good`` after them."""
    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register("bad", handler)
    handlers.register("good", lambda ctx: None)
    async with running(engine, handlers) as runtime:
        bad = await enqueue(engine, "bad", count, max_attempts=1)
        [good] = await enqueue(engine, "good")
        for record in [*bad, good]:
            await wait_until(_settled_check(engine, record.id))
        health = runtime.health()
        assert health.healthy, health
        final = [await job(engine, record.id) for record in bad]
        assert (await job(engine, good.id)).state == JobState.Completed
    return engine, final, health


def _settled_check(engine: Any, job_id: int) -> Any:
    return lambda: _settled(engine, job_id)


async def _settled(engine: Any, job_id: int) -> bool:
    return (await job(engine, job_id)).state not in (JobState.Available, JobState.Running)


@pytest.mark.parametrize(("name", "make"), RAISED, ids=[name for name, _ in RAISED])
@pytest.mark.parametrize("style", ["async", "sync"])
async def test_a_base_exception_from_a_handler_is_a_failed_attempt(
    name: str, make: Any, style: str
) -> None:
    raise_it = make()
    if style == "async":

        async def handler(ctx: AttemptContext) -> None:
            await sleep(0)
            raise_it()

    else:

        def handler(ctx: AttemptContext) -> None:  # type: ignore[misc]
            raise_it()

    # Three in a row: the runtime survives each and still runs the good job after them.
    _, records, _ = await _run(handler, count=3)
    for record in records:
        assert record.state == JobState.Failed
        assert record.errors[-1]["error"].startswith(f"{name}")
        assert record.attempt == 1


async def test_awaiting_a_cancelled_future_is_a_failed_attempt() -> None:
    async def handler(ctx: AttemptContext) -> None:
        await _cancelled_future()

    _, [record], _ = await _run(handler)
    assert record.state == JobState.Failed
    assert record.errors[-1]["error"].startswith("CancelledError")


async def test_the_messages_name_type_and_text() -> None:
    async def handler(ctx: AttemptContext) -> None:
        raise SystemExit("leaving now")

    _, [record], _ = await _run(handler)
    assert record.errors[-1]["error"].startswith("SystemExit: leaving now")


async def test_shutdown_still_releases_an_attempt_it_interrupts() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    started = anyio.Event()

    async def handler(ctx: AttemptContext) -> None:
        started.set()
        await anyio.sleep_forever()  # holds its slot until the runtime cancels it

    handlers.register("slow", handler)
    async with running(engine, handlers, shutdown_ms=100):
        [record] = await enqueue(engine, "slow")
        await started.wait()
    released = await job(engine, record.id)
    # Released unspent, not recorded as a CancelledError failure of the handler. The
    # release is due at once, so the leader may already have promoted it.
    assert released.state in (JobState.Retryable, JobState.Available)
    assert released.attempt == 0
    assert released.errors[-1]["error"] == "worker shutting down"
    assert not any("CancelledError" in e["error"] for e in released.errors)


async def test_an_operator_cancel_is_not_a_handler_failure() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    started = anyio.Event()

    async def handler(ctx: AttemptContext) -> None:
        started.set()
        await anyio.sleep_forever()  # holds its slot until the runtime cancels it

    handlers.register("slow", handler)
    async with running(engine, handlers) as runtime:
        [record] = await enqueue(engine, "slow")
        await started.wait()
        await engine.cancel_job(record.id)
        await wait_until(lambda: _settled(engine, record.id))
        assert runtime.health().healthy
    cancelled = await job(engine, record.id)
    assert cancelled.state == JobState.Cancelled
    assert not any("CancelledError" in e["error"] for e in cancelled.errors)


async def test_a_handler_blocking_the_event_loop_delays_but_does_not_lose_work() -> None:
    """Defined outcome: a sync call inside an ``async def`` handler stalls the loop (no
    claims, no completions meanwhile); when it returns, its job completes and the jobs
    queued behind it run. Heartbeats are kept by their own thread in a worker process
    (see ``HeartbeatService``)."""

    async def handler(ctx: AttemptContext) -> None:
        # A real blocking call is the point: while it runs the loop runs nothing, so no
        # signal or clock can stand in for it; its length only has to be noticeable.
        time.sleep(0.3)

    _, [record], _ = await _run(handler)
    assert record.state == JobState.Completed


@pytest.mark.parametrize("value", [42, "done", object(), [1, 2], {"a": 1}])
async def test_an_unexpected_return_value_completes_the_job(value: Any) -> None:
    """Defined outcome: any value other than ``RetryAfter``, ``Snooze``, ``Cancel`` or
    ``WaitForCallback`` completes the attempt (as ``None`` does), as in awa-pg 0.6.9."""

    async def handler(ctx: AttemptContext) -> Any:
        return value

    _, [record], _ = await _run(handler)
    assert record.state == JobState.Completed
    assert record.errors == ()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0.0])
async def test_register_callback_refuses_a_timeout_no_timestamp_can_hold(timeout: float) -> None:
    async def handler(ctx: AttemptContext) -> None:
        await ctx.register_callback(timeout_seconds=timeout)

    _, [record], _ = await _run(handler)
    assert record.state == JobState.Failed
    assert record.errors[-1]["error"].startswith("ValidationError: timeout_seconds: must be")


async def test_progress_with_nul_is_refused_when_set_not_lost_at_flush() -> None:
    refused: list[str] = []

    async def handler(ctx: AttemptContext) -> None:
        calls: list[Callable[[], None]] = [
            lambda: ctx.set_progress(5, "a\x00b"),
            lambda: ctx.update_metadata({"k": "\ud800"}),
            lambda: ctx.update_metadata({1: "x"}),  # type: ignore[dict-item]
        ]
        for call in calls:
            try:
                call()
            except ValueError as exc:
                refused.append(str(exc))
        ctx.set_progress(50, "fine")

    _, [record], _ = await _run(handler)
    assert record.state == JobState.Completed
    assert [text.split(":")[0] for text in refused] == ["progress.message"] + [
        "progress.metadata"
    ] * 2


async def test_an_outcome_the_engine_cannot_store_is_recorded_as_a_failed_attempt() -> None:
    engine = make_engine()

    async def broken_snooze(lease: Any, *, delay: Any) -> Any:
        raise OverflowError("date value out of range")

    engine.snooze = broken_snooze  # type: ignore[method-assign]
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> Any:
        from awa.domain.handler_results import Snooze

        return Snooze(60)

    handlers.register("bad", handler)
    async with running(engine, handlers):
        [record] = await enqueue(engine, "bad", max_attempts=1)
        await wait_until(_settled_check(engine, record.id))
    final = await job(engine, record.id)
    assert final.state == JobState.Failed
    assert final.errors[-1]["error"] == (
        "the handler's outcome SnoozeOutcome could not be recorded: "
        "OverflowError: date value out of range"
    )


async def test_shutdown_with_a_bad_timeout_is_refused_and_the_worker_keeps_running() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register("good", lambda ctx: None)
    async with running(engine, handlers) as runtime:
        bad: Any
        for bad in (float("nan"), float("-inf"), -5):
            with pytest.raises(ValueError, match="timeout_ms"):
                await runtime.shutdown(bad)
        [record] = await enqueue(engine, "good")
        await wait_until(_settled_check(engine, record.id))
        assert (await job(engine, record.id)).state == JobState.Completed
        assert runtime.health().healthy
