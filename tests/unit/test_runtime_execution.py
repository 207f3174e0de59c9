"""Dispatch, execution and outcome mapping on the in-memory engine."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.errors import TerminalError
from awa.domain.handler_results import Cancel, RetryAfter, Snooze, WaitForCallback
from awa.domain.job import RunLease
from awa.domain.policies import NO_JITTER
from awa.domain.states import JobState
from awa.ports.storage import Ack
from awa.runtime import AttemptContext, HandlerRegistry
from awa.runtime.completion import CompletionBatcher
from tests.unit.test_runtime_support import (
    REAL_TIME_GUARD,
    clock_of,
    enqueue,
    fast_config,
    job,
    make_engine,
    running,
    sleep,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_async_and_sync_handlers_run_and_sync_does_not_block_the_loop() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    seen: list[str] = []
    threads: list[int] = []
    release = threading.Event()

    async def async_handler(ctx: AttemptContext) -> None:
        seen.append(f"async:{ctx.record.args['n']}")

    def sync_handler(ctx: AttemptContext) -> None:
        threads.append(threading.get_ident())
        # Holds its thread until the test lets go (the bound only keeps a failed test
        # from leaving the thread behind).
        release.wait(REAL_TIME_GUARD)
        seen.append("sync")

    handlers.register("a", async_handler)
    handlers.register("s", sync_handler)

    async with running(engine, handlers) as runtime:
        [sync_job] = await enqueue(engine, "s")
        await wait_until(lambda: threads)
        # While the sync handler holds its thread, the loop claims and runs other jobs.
        jobs = await enqueue(engine, "a", 3)
        await wait_until(lambda: len(seen) == 3)
        assert "sync" not in seen
        release.set()
        for record in [sync_job, *jobs]:
            await wait_until(_completed(engine, record.id))
        assert threading.get_ident() not in threads
        assert sorted(seen) == ["async:0", "async:1", "async:2", "sync"]
        assert runtime.health().healthy


async def _state_is(engine: Any, job_id: int, state: JobState) -> bool:
    return (await job(engine, job_id)).state == state


async def _claims(engine: Any, count: int) -> list[Any]:
    await enqueue(engine, "k", count)
    return list(await engine.claim("default", limit=count))


def _completed(engine: Any, job_id: int) -> Callable[[], Awaitable[bool]]:
    return lambda: _state_is(engine, job_id, JobState.Completed)


async def _run_one(handler: Any, kind: str = "k") -> tuple[Any, Any]:
    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register(kind, handler)
    async with running(engine, handlers):
        [record] = await enqueue(engine, "k")
        await wait_until(
            lambda: _state_not_in(engine, record.id, (JobState.Available, JobState.Running))
        )
        return engine, await job(engine, record.id)


async def _state_not_in(engine: Any, job_id: int, states: Sequence[JobState]) -> bool:
    return (await job(engine, job_id)).state not in states


async def test_return_value_other_than_result_completes() -> None:
    async def handler(ctx: AttemptContext) -> str:
        return "ignored"

    _, record = await _run_one(handler)
    assert record.state == JobState.Completed


async def test_retry_after_schedules_a_retry() -> None:
    returned_at: list[datetime] = []

    async def handler(ctx: AttemptContext) -> RetryAfter:
        returned_at.append(ctx.clock.now())
        return RetryAfter(30)

    _, record = await _run_one(handler)
    assert record.state == JobState.Retryable
    assert record.attempt == 1
    assert record.run_at == returned_at[0] + timedelta(seconds=30)


async def test_snooze_does_not_spend_an_attempt() -> None:
    async def handler(ctx: AttemptContext) -> Snooze:
        return Snooze(60)

    _, record = await _run_one(handler)
    assert record.state == JobState.Scheduled
    assert record.attempt == 0
    assert record.errors == ()


async def test_cancel_result_cancels() -> None:
    async def handler(ctx: AttemptContext) -> Cancel:
        return Cancel("not needed")

    _, record = await _run_one(handler)
    assert record.state == JobState.Cancelled


async def test_wait_for_callback_result_parks_the_job() -> None:
    async def handler(ctx: AttemptContext) -> WaitForCallback:
        token = await ctx.register_callback(timeout_seconds=60)
        return WaitForCallback(token)

    _, record = await _run_one(handler)
    assert record.state == JobState.WaitingExternal
    assert record.callback_id is not None


async def test_exception_is_retryable_with_error_text() -> None:
    async def handler(ctx: AttemptContext) -> None:
        raise ValueError("boom")

    _, record = await _run_one(handler)
    assert record.state == JobState.Retryable
    error = record.errors[-1]["error"]
    assert error.startswith("ValueError: boom\n")
    assert "raise ValueError" in error
    assert len(error.splitlines()) <= 11


async def test_terminal_error_fails_without_retry() -> None:
    class Fatal(TerminalError):
        pass

    def handler(ctx: AttemptContext) -> None:
        raise Fatal("bad input")

    _, record = await _run_one(handler)
    assert record.state == JobState.Failed
    assert record.errors[-1]["error"] == "Fatal: bad input"
    assert record.errors[-1].get("terminal") is True


async def test_unknown_kind_fails_terminally() -> None:
    async def handler(ctx: AttemptContext) -> None:
        raise AssertionError("not called")

    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register("known", handler)
    async with running(engine, handlers):
        [record] = await enqueue(engine, "mystery")
        await wait_until(lambda: _state_is(engine, record.id, JobState.Failed))
    failed = await job(engine, record.id)
    assert failed.errors[-1]["error"] == "unknown job kind: mystery"


async def test_job_factory_builds_the_handler_argument() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    got: list[Any] = []

    async def handler(value: Any) -> None:
        got.append(value)

    handlers.register("k", handler, job_factory=lambda rec, ctx: ("job", rec.id, ctx.lease))
    async with running(engine, handlers):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: got)
    assert got == [("job", record.id, RunLease(record.id, 1))]


async def test_completions_are_batched() -> None:
    engine = make_engine()
    calls: list[int] = []
    original = engine.complete

    async def counting(leases: Sequence[RunLease]) -> list[Ack]:
        calls.append(len(leases))
        return await original(leases)

    engine.complete = counting  # type: ignore[method-assign]
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> None:
        await sleep(0.01)

    handlers.register("k", handler)
    config = fast_config(handlers, [("default", 100)], completion_flush_ms=5)
    async with running(engine, handlers, config):
        await enqueue(engine, "k", 200)
        await wait_until(lambda: sum(calls) == 200)
    assert len(calls) < 40
    counts = {c.queue: c for c in await engine.queue_counts()}
    assert counts["default"].count(JobState.Completed) == 200


async def test_permit_returns_when_the_completion_is_queued_and_the_attempt_stays_live() -> None:
    engine = make_engine()
    gate = anyio.Event()
    original = engine.complete

    async def gated(leases: Sequence[RunLease]) -> list[Ack]:
        await gate.wait()
        return await original(leases)

    engine.complete = gated  # type: ignore[method-assign]
    handlers = HandlerRegistry()
    started: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        started.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with running(engine, handlers, fast_config(handlers, [("default", 1)])) as runtime:
        first, second = await enqueue(engine, "k", 2)
        # One permit: the second handler runs while the first completion is unflushed.
        await wait_until(lambda: started == [first.id, second.id])
        # Both attempts are still live (heartbeated, awaited by shutdown) and running.
        assert {c.lease.job_id for c in runtime.inflight.snapshot()} == {first.id, second.id}
        assert runtime.batcher.unacknowledged == 2
        assert await _state_is(engine, first.id, JobState.Running)
        gate.set()
        await wait_until(lambda: _state_is(engine, second.id, JobState.Completed))
        await wait_until(lambda: len(runtime.inflight) == 0)
        assert await _state_is(engine, first.id, JobState.Completed)


async def test_completion_backlog_pushes_back_on_handlers() -> None:
    engine = make_engine()
    gate = anyio.Event()
    original = engine.complete

    async def gated(leases: Sequence[RunLease]) -> list[Ack]:
        await gate.wait()
        return await original(leases)

    engine.complete = gated  # type: ignore[method-assign]
    clock = clock_of(engine)
    batcher = CompletionBatcher(engine, clock=clock, batch_size=2, flush_interval=0.0)
    [a, b, c] = [claim.lease for claim in await _claims(engine, 3)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        first = await batcher.submit(a)
        second = await batcher.submit(b)
        queued: list[RunLease] = []

        async def third() -> None:
            await batcher.submit(c)
            queued.append(c)

        tg.start_soon(third)
        await clock.settle()
        # Two unacknowledged completions fill the backlog: the third waits for room.
        assert queued == []
        assert batcher.unacknowledged == 2
        gate.set()
        assert await first.wait() is Ack.APPLIED
        assert await second.wait() is Ack.APPLIED
        await clock.settle()
        assert queued == [c]
        assert batcher.unacknowledged == 0
        tg.cancel_scope.cancel()


async def test_hard_reserved_cap_is_never_exceeded() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    active = peak = done = 0

    async def handler(ctx: AttemptContext) -> None:
        nonlocal active, peak, done
        active += 1
        peak = max(peak, active)
        await sleep(0.01)
        active -= 1
        done += 1

    handlers.register("k", handler)
    async with running(engine, handlers, fast_config(handlers, [("default", 3)])):
        await enqueue(engine, "k", 30)
        await wait_until(lambda: done == 30)
    assert peak == 3


async def test_weighted_overflow_split_by_weight_with_min_guarantee() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    active = {"a": 0, "b": 0, "c": 0}
    # How the slots were shared as of the last handler start at each instant of the clock
    # (the first few instants, while the slots first fill, are left out below).
    shares: dict[float, dict[str, int]] = {}
    enough = anyio.Event()
    peak = 0

    def make(queue: str) -> Any:
        async def handler(ctx: AttemptContext) -> None:
            nonlocal peak
            active[queue] += 1
            peak = max(peak, sum(active.values()))
            shares[ctx.clock.monotonic()] = dict(active)
            if len(shares) > 33:  # the share through 30 instants after the fill
                enough.set()
            await sleep(0.05)
            active[queue] -= 1

        return handler

    for queue in active:
        handlers.register(queue, make(queue), queue=queue)
    config = fast_config(
        handlers,
        [
            {"name": "a", "weight": 2},
            {"name": "b", "weight": 1},
            {"name": "c", "min_workers": 2, "weight": 1},
        ],
        global_max_workers=11,
    )
    async with running(engine, handlers, config) as runtime:
        await enqueue(engine, "a", 200, queue="a")
        await enqueue(engine, "b", 200, queue="b")
        await enqueue(engine, "c", 200, queue="c")
        await enough.wait()
        health = runtime.health().queues
        assert health["c"].min_workers == 2 and health["a"].weight == 2
        assert health["a"].max_workers is None
    samples = [shares[instant] for instant in sorted(shares)[3:33]]
    assert peak <= 11
    mean = {q: sum(s[q] for s in samples) / len(samples) for q in active}
    # Overflow of 9 split 2:1:1 on top of c's guaranteed 2: about 4.5 / 2.25 / 4.25.
    assert mean["a"] > mean["b"] * 1.4
    assert mean["c"] >= 2 and mean["c"] > mean["b"]
    assert sum(mean.values()) > 8  # overflow is in use, not just the minimum


async def test_rate_limit_gates_claims() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    stamps: list[float] = []

    async def handler(ctx: AttemptContext) -> None:
        stamps.append(ctx.clock.monotonic())

    handlers.register("k", handler)
    config = fast_config(
        handlers, [{"name": "default", "max_workers": 10, "rate_limit": (20.0, 2)}]
    )
    async with running(engine, handlers, config):
        await enqueue(engine, "k", 8)
        await wait_until(lambda: len(stamps) == 8)
    # Burst of 2 at once, then 20/s: the remaining 6 take 0.3 s of the clock (a claim
    # loop looks again within a 20 ms poll of each token).
    assert 0.3 <= stamps[-1] - stamps[0] <= 0.3 + 0.02


def _stamping_handlers() -> tuple[HandlerRegistry, list[float]]:
    """Handlers whose one kind ``k`` records when each attempt started."""
    handlers = HandlerRegistry()
    picked: list[float] = []

    async def handler(ctx: AttemptContext) -> None:
        picked.append(ctx.clock.monotonic())

    handlers.register("k", handler)
    return handlers, picked


async def test_pickup_latency_with_notifications_is_well_under_100ms() -> None:
    engine = make_engine()
    handlers, picked = _stamping_handlers()
    # A long poll interval proves the wake-up came from the notification.
    config = fast_config(handlers, poll_interval_ms=5000)
    async with running(engine, handlers, config):
        await sleep(0.05)
        latencies: list[float] = []
        for expected in range(1, 6):
            before = clock_of(engine).monotonic()
            await enqueue(engine, "k")
            await wait_until(_count_reaches(picked, expected), interval=0.001)
            latencies.append(picked[-1] - before)
    assert max(latencies) < 0.1


async def test_finished_handlers_do_not_wake_a_loop_that_emptied_the_queue() -> None:
    """Jobs arriving one by one, 5 ms apart: about one claim each, woken by each job's
    notification. A permit coming back wakes only a loop that waits for permits; before,
    every finished handler woke the loop for one more, empty, claim (two per job)."""
    engine = make_engine()
    handlers, picked = _stamping_handlers()
    config = fast_config(handlers, poll_interval_ms=5000)
    count = 20
    async with running(engine, handlers, config) as runtime:
        await sleep(0.05)
        [dispatcher] = runtime.dispatchers
        before = dispatcher.claim_calls
        for _ in range(count):
            await enqueue(engine, "k")
            await sleep(0.005)
        await wait_until(_count_reaches(picked, count), interval=0.001)
        await sleep(0.05)
        # One claim per job, plus a few: a look again 20 ms after the last one, and
        # the odd claim that found a job its predecessor's notification had announced.
        assert dispatcher.claim_calls - before <= count + 5


async def test_a_loop_out_of_permits_is_woken_when_one_comes_back() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[int] = []
    gate = anyio.Event()

    async def handler(ctx: AttemptContext) -> None:
        if ctx.record.args["n"] == 0:
            await gate.wait()
        done.append(ctx.record.args["n"])

    handlers.register("k", handler)
    # One permit and a poll far beyond the test's timeout: the second job can only start
    # because the first one's permit coming back wakes the loop.
    config = fast_config(handlers, [("default", 1)], poll_interval_ms=60_000)
    async with running(engine, handlers, config):
        await enqueue(engine, "k", 2)
        await sleep(0.05)
        assert done == []
        gate.set()
        await wait_until(lambda: done == [0, 1])


def _count_reaches(items: list[float], count: int) -> Callable[[], bool]:
    return lambda: len(items) == count


async def test_no_claims_after_shutdown_begins() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    ran: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        ran.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with running(engine, handlers) as runtime:
        await runtime.shutdown(500)
        [record] = await enqueue(engine, "k")
        await sleep(0.1)
        assert ran == []
        assert (await job(engine, record.id)).state == JobState.Available
        assert runtime.health().shutting_down
        assert not runtime.health().poll_loop_alive


class _OneAtATimeEngine(InMemoryEngine):
    """Hands out at most one job per claim, as a claim does that finds the other lanes
    locked by another worker."""

    async def claim(self, queue: str, *, limit: int, **kwargs: Any) -> list[Any]:
        return list(await super().claim(queue, limit=min(limit, 1), **kwargs))


async def test_a_short_claim_that_found_jobs_looks_again_soon() -> None:
    """A claim that came back with fewer jobs than asked but not none may have skipped
    lanes other workers held: the loop looks again within tens of ms, not after its
    poll interval (a minute here), even though no notification or permit wakes it."""
    engine = _OneAtATimeEngine(clock=ManualClock(), backoff=NO_JITTER)
    handlers, picked = _stamping_handlers()
    config = fast_config(handlers, poll_interval_ms=60_000)
    async with running(engine, handlers, config):
        await sleep(0.05)
        await enqueue(engine, "k", 5)
        await wait_until(_count_reaches(picked, 5), timeout=2.0)
