"""Heartbeats, cancellation, progress, callbacks, leadership, shutdown and snapshots."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.inmemory.runtime_registry import InMemoryRuntimeRegistry
from awa.domain.job import RunLease
from awa.domain.policies import NO_JITTER
from awa.domain.states import JobState
from awa.entrypoints.routing import inmemory_control_plane
from awa.ports.storage import Ack, StorageEngine
from awa.runtime import AttemptContext, HandlerRegistry, Runtime
from awa.runtime import runtime as runtime_module
from tests.support.waits import until
from tests.unit.test_runtime_support import (
    REAL_TIME_GUARD,
    clock_of,
    enqueue,
    fast_config,
    job,
    make_engine,
    on_clock,
    running,
    sleep,
    wait_until,
    within,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def _blocking_handler(started: list[AttemptContext], *, until_cancelled: bool = True) -> Any:
    async def handler(ctx: AttemptContext) -> None:
        started.append(ctx)
        with within(5):
            while until_cancelled and not ctx.is_cancelled():
                await sleep(0.005)

    return handler


async def test_stale_heartbeat_flips_the_cancel_flag() -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    handlers = HandlerRegistry()
    started: list[AttemptContext] = []
    handlers.register("k", _blocking_handler(started))
    # Rescue is driven by hand below; keep the leader's own rescue out of the way.
    config = fast_config(handlers, heartbeat_rescue_interval_ms=60_000)
    async with running(engine, handlers, config, leader=False):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: started)
        clock.advance(timedelta(minutes=10))
        rescued = await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=90))
        assert [r.lease for r in rescued] == [started[0].lease]
        await wait_until(started[0].is_cancelled, timeout=1.0)
    after = await job(engine, record.id)
    # The late outcome was stale: the rescue's retry stands.
    assert after.state == JobState.Retryable
    assert after.errors[-1]["error"] != "worker shutting down"


async def test_heartbeats_refresh_running_attempts() -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    handlers = HandlerRegistry()
    started: list[AttemptContext] = []
    handlers.register("k", _blocking_handler(started))
    async with running(engine, handlers, leader=False) as runtime:
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: started)
        first = (await job(engine, record.id)).heartbeat_at
        assert first is not None
        ticks = runtime.heartbeat.ticks
        clock.advance(5)
        await wait_until(lambda: runtime.heartbeat.ticks > ticks)
        refreshed = (await job(engine, record.id)).heartbeat_at
        assert refreshed is not None and refreshed >= first + timedelta(seconds=5)
        started[0].request_cancel()


async def test_cancel_notification_flips_the_flag_quickly() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    started: list[AttemptContext] = []
    handlers.register("k", _blocking_handler(started))
    # Heartbeats are far apart: only the awa:cancel notification can explain a fast flip.
    config = fast_config(handlers, heartbeat_interval_ms=60_000)
    async with running(engine, handlers, config):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: started)
        before = time.monotonic()
        await engine.cancel_job(record.id)
        await wait_until(started[0].is_cancelled, timeout=1.0, interval=0.001)
        assert time.monotonic() - before < 0.1
    assert (await job(engine, record.id)).state == JobState.Cancelled


async def test_progress_is_flushed_on_heartbeat_and_kept_across_retries() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    seen: list[dict[str, Any] | None] = []

    async def handler(ctx: AttemptContext) -> None:
        seen.append(ctx.record.progress)
        if ctx.record.attempt == 1:
            ctx.set_progress(40, "halfway")
            ctx.update_metadata({"cursor": 7})
            await wait_until(lambda: _progress(engine, ctx.lease.job_id), timeout=2)
            raise RuntimeError("try again")

    handlers.register("k", handler)
    async with running(engine, handlers):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: _state_is(engine, record.id, JobState.Retryable))
        # Simulated time passes the back-off; the leader promotes it.
        await wait_until(lambda: _state_is(engine, record.id, JobState.Completed))
    assert seen[0] is None
    assert seen[1] == {"percent": 40, "message": "halfway", "metadata": {"cursor": 7}}


async def _progress(engine: Any, job_id: int) -> Any:
    return (await job(engine, job_id)).progress


async def _state_is(engine: Any, job_id: int, state: JobState) -> bool:
    return (await job(engine, job_id)).state == state


async def test_flush_progress_and_sync_flush_from_a_thread() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    snapshots: list[Any] = []

    def handler(ctx: AttemptContext) -> None:
        ctx.set_progress(150, "clamped")
        ctx.flush_progress_sync()
        snapshots.append(
            anyio.from_thread.run(engine.get_job, ctx.lease.job_id).progress  # type: ignore[union-attr]
        )

    handlers.register("k", handler)
    async with running(engine, handlers, fast_config(handlers, heartbeat_interval_ms=60_000)):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: _state_is(engine, record.id, JobState.Completed))
    assert snapshots == [{"percent": 100, "message": "clamped", "metadata": {}}]


async def test_wait_for_callback_resumes_with_payload() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    tokens: list[str] = []
    payloads: list[Any] = []

    async def handler(ctx: AttemptContext) -> None:
        token = await ctx.register_callback(timeout_seconds=30)
        tokens.append(token.id)
        payloads.append(await ctx.wait_for_callback(token))

    handlers.register("k", handler)
    async with running(engine, handlers):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: _state_is(engine, record.id, JobState.WaitingExternal))
        await sleep(0.1)  # heartbeats while parked must not cancel the attempt
        await engine.resolve_callback(tokens[0], action="resume", payload={"ok": True})
        await wait_until(lambda: _state_is(engine, record.id, JobState.Completed))
    assert payloads == [{"ok": True}]


async def test_leader_promotes_and_rescues_and_only_one_leads() -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    handlers = HandlerRegistry()
    ran: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        ran.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with (
        running(engine, handlers) as first,
        running(engine, handlers) as second,
    ):
        await wait_until(lambda: first.is_leader or second.is_leader)
        await sleep(0.1)
        assert [first.is_leader, second.is_leader].count(True) == 1
        assert [first.health().leader, second.health().leader].count(True) == 1
        # Promotion: a scheduled job becomes due and runs.
        [later] = await enqueue(engine, "k", run_at=clock.now() + timedelta(seconds=5))
        clock.advance(6)
        await wait_until(lambda: later.id in ran)
        # Rescue: an attempt claimed elsewhere and abandoned is retried.
        [orphan] = await enqueue(engine, "orphan", queue="elsewhere")
        [claim] = await engine.claim("elsewhere", limit=1)
        clock.advance(timedelta(minutes=5))
        await wait_until(lambda: _state_is(engine, orphan.id, JobState.Retryable))
        assert (await job(engine, orphan.id)).errors[-1]["error"]
        assert claim.lease.job_id == orphan.id


async def test_another_runtime_takes_over_when_the_leader_goes() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> None:
        return None

    handlers.register("k", handler)
    async with running(engine, handlers) as first:
        await wait_until(lambda: first.is_leader)
        async with running(engine, handlers) as second:
            await sleep(0.1)
            assert not second.is_leader
            # A lost lock (dead connection) is noticed and the other candidate wins.
            engine.election.revoke()
            await wait_until(lambda: second.is_leader or first.is_leader)
            leader, other = (first, second) if first.is_leader else (second, first)
            await leader.shutdown(500)
            await wait_until(lambda: other.is_leader)


async def test_shutdown_drains_in_flight_handlers() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    finished: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        await sleep(0.15)
        finished.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with running(engine, handlers) as runtime:
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: len(runtime.inflight) == 1)
        await runtime.shutdown(2000)
        assert finished == [record.id]
        assert len(runtime.inflight) == 0
    assert (await job(engine, record.id)).state == JobState.Completed


async def test_shutdown_timeout_cancels_and_releases_unfinished_attempts() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    started: list[AttemptContext] = []
    saw_flag: list[bool] = []
    let_go = threading.Event()

    async def stubborn(ctx: AttemptContext) -> None:
        started.append(ctx)
        try:
            await anyio.sleep_forever()
        finally:
            saw_flag.append(ctx.is_cancelled())

    def blocking(ctx: AttemptContext) -> None:
        started.append(ctx)
        # Holds its thread until the test lets it go, after the shutdown has given up.
        assert let_go.wait(REAL_TIME_GUARD), "the test never let the sync handler go"

    handlers.register("async", stubborn)
    handlers.register("sync", blocking)
    # The clock runs on while the sync handler holds its thread: that is what overruns.
    async with running(engine, handlers, clock_waits_for_threads=False) as runtime:
        a, s = await enqueue(engine, "async") + await enqueue(engine, "sync")
        # Host time: the clock runs on while the sync handler's thread starts, so a wait
        # on the clock could pass before that thread has had its turn.
        await until(lambda: len(started) == 2, "both handlers started")
        before = clock_of(engine).monotonic()
        await runtime.shutdown(50)
        # the 50 ms drain, then the release: neither handler ever ends by itself
        assert clock_of(engine).monotonic() - before < 2
        let_go.set()
    assert saw_flag == [True]
    for record in (a, s):
        after = await job(engine, record.id)
        # Released as retryable-due-now; the leader may already have promoted it.
        assert after.state in (JobState.Retryable, JobState.Available)
        assert after.attempt == 0  # the attempt was given back, not spent
        assert after.errors[-1]["error"] == "worker shutting down"


def _mail_handlers() -> HandlerRegistry:
    """One no-op handler of kind ``k`` on queue ``mail``."""
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> None:
        return None

    handlers.register("k", handler, queue="mail")
    return handlers


async def test_runtime_snapshots_are_published() -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    registry = InMemoryRuntimeRegistry(clock)
    handlers = _mail_handlers()
    async with running(engine, handlers, registry=registry) as runtime:
        await wait_until(lambda: runtime.is_leader)
        await wait_until(lambda: _leader_row(registry))
        [row] = await registry.list_runtimes(live_within=timedelta(seconds=30))
        assert row.id == runtime.id and row.pid > 0 and row.hostname
        assert [q.name for q in row.queues] == ["mail"]
        clock.advance(5)
        await wait_until(lambda: _seen_at(registry, clock.now()))
    [final] = await registry.list_runtimes()
    assert final.shutting_down and not final.healthy


async def test_taking_the_lease_republishes_the_snapshot_at_once() -> None:
    """A runtime that becomes leader between snapshots publishes at once: the fleet view
    (and `awa health`) names the leader that acts, not the one of the last interval."""
    clock = ManualClock()
    engine = make_engine(clock)
    registry = InMemoryRuntimeRegistry(clock)
    handlers = _mail_handlers()
    other = engine.leader_lock()
    held = await other.try_acquire(3600.0)
    assert held is not None and held.held
    config = fast_config(handlers, snapshot_interval_ms=3_600_000)
    async with running(engine, handlers, config, registry=registry) as runtime:
        await wait_until(lambda: registry.list_runtimes())
        [row] = await registry.list_runtimes()
        assert not row.leader and not runtime.is_leader
        await other.release()
        with within(5):
            await wait_until(lambda: _leader_row(registry), timeout=5)
        assert runtime.is_leader


class _HeldWrite(InMemoryRuntimeRegistry):
    """A registry whose first write once ``holding`` is set waits for ``release``, and
    counts how often such a write was cut off."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.holding = False
        self.held = anyio.Event()
        self.release = anyio.Event()
        self.cut_off = 0

    async def upsert_runtime(self, snapshot: Any) -> None:
        if self.holding and not self.held.is_set():
            self.held.set()
            try:
                await self.release.wait()
            except BaseException:
                self.cut_off += 1
                raise
        await super().upsert_runtime(snapshot)


@pytest.mark.parametrize("released", [True, False])
async def test_a_snapshot_write_under_way_at_shutdown_is_not_cut_off(released: bool) -> None:
    """A snapshot write under way when the runtime stops goes on (a statement the driver
    abandons can commit after the registry's goodbye and put the row of a runtime that is
    gone back), up to ``_SNAPSHOT_WRITE_GRACE``; then it is cut off and shutdown ends."""
    clock = ManualClock()
    engine = make_engine(clock)
    registry = _HeldWrite(clock)
    handlers = _mail_handlers()
    config = fast_config(handlers, snapshot_interval_ms=1_000)
    runtime = Runtime(
        engine,
        engine,
        engine.leader_lock(),
        clock,
        handlers,
        config,
        runtime_registry=registry,
        control=inmemory_control_plane(engine, clock),
    )
    async with on_clock(clock, runtime):
        await runtime.start()
        await wait_until(registry.list_runtimes)
        registry.holding = True
        await registry.held.wait()
        async with anyio.create_task_group() as group:
            group.start_soon(runtime.shutdown, 100)
            await sleep(runtime_module._SNAPSHOT_WRITE_GRACE * 0.8)
            assert registry.cut_off == 0 and runtime.running
            if released:
                registry.release.set()
        assert not runtime.running
    assert registry.cut_off == (0 if released else 1)
    [final] = await registry.list_runtimes()
    assert final.shutting_down


async def _leader_row(registry: InMemoryRuntimeRegistry) -> bool:
    rows = await registry.list_runtimes()
    return bool(rows) and rows[0].leader


async def _seen_at(registry: InMemoryRuntimeRegistry, instant: Any) -> bool:
    rows = await registry.list_runtimes()
    return bool(rows) and rows[0].last_seen_at == instant


class _RecordingHeartbeatEngine:
    """A thread-side engine that only records heartbeats (all live)."""

    def __init__(self) -> None:
        self.beats: list[int] = []
        self.beat = threading.Condition()
        self.closed = False
        self.thread_ids: set[int] = set()

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        self.thread_ids.add(threading.get_ident())
        with self.beat:
            self.beats.append(len(leases))
            self.beat.notify_all()
        return [Ack.APPLIED for _ in leases]

    async def update_progress(self, lease: RunLease, **kwargs: Any) -> Ack:
        return Ack.APPLIED

    async def close(self) -> None:
        self.closed = True


async def test_heartbeat_thread_keeps_beating_while_the_loop_is_blocked() -> None:
    engine = make_engine()
    clock = clock_of(engine)
    side = _RecordingHeartbeatEngine()

    async def factory() -> StorageEngine:
        return side  # type: ignore[return-value]

    handlers = HandlerRegistry()
    blocking = threading.Event()
    release = threading.Event()
    during: list[int] = []

    async def hog(ctx: AttemptContext) -> None:
        blocking.set()
        release.wait(10)  # blocks the event loop on purpose, until the test lets go

    def while_blocked() -> None:
        """From a thread of its own (the loop is stuck): five heartbeat intervals pass
        on the clock, and the heartbeat thread beats for the attempt at each."""
        blocking.wait(10)
        try:
            for _ in range(5):
                with side.beat:
                    seen = len(side.beats)
                    # the heartbeat thread may not wait yet: advance until it beats
                    while True:
                        clock.advance(0.03)
                        if side.beat.wait_for(lambda s=seen: len(side.beats) > s, 0.05):  # type: ignore[misc]
                            break
                    during.append(side.beats[-1])
        finally:
            release.set()

    handlers.register("k", hog)
    helper = threading.Thread(target=while_blocked)
    helper.start()
    try:
        async with running(engine, handlers, heartbeat_engine_factory=factory) as runtime:
            [record] = await enqueue(engine, "k")
            await wait_until(lambda: _state_is(engine, record.id, JobState.Completed))
            assert runtime.health().heartbeat_alive
    finally:
        release.set()
        helper.join()
    assert during == [1, 1, 1, 1, 1]  # one live attempt at each tick of the stall
    assert threading.get_ident() not in side.thread_ids
    assert side.closed


async def test_health_reports_hard_reserved_queues() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> None:
        return None

    handlers.register("k", handler)
    async with running(engine, handlers, fast_config(handlers, [("default", 4)])) as runtime:
        health = runtime.health()
        assert health.healthy and health.poll_loop_alive and health.heartbeat_alive
        assert health.postgres_connected and not health.shutting_down
        queue = health.queues["default"]
        assert (queue.max_workers, queue.in_flight, queue.available) == (4, 0, 4)
        assert queue.min_workers is None and queue.weight is None and queue.overflow_held is None
    assert not runtime.health().healthy


class _BrokenNotifier:
    """A notifier whose LISTEN always fails."""

    def __init__(self) -> None:
        self.attempts = 0

    async def subscribe(self, channels: list[str]) -> Any:
        self.attempts += 1
        raise ConnectionError("listen failed")


async def test_polling_takes_over_when_listen_fails() -> None:
    from awa.runtime import Runtime

    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler)
    notifier = _BrokenNotifier()
    runtime = Runtime(engine, notifier, None, clock_of(engine), handlers, fast_config(handlers))
    async with on_clock(clock_of(engine), runtime):
        await runtime.start()
        try:
            [record] = await enqueue(engine, "k")
            await wait_until(lambda: done == [record.id], timeout=1.0)
            assert notifier.attempts >= 1
        finally:
            await runtime.shutdown(500)


async def test_runtime_can_start_again_after_shutdown() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with running(engine, handlers) as runtime:
        await runtime.shutdown(500)
        with pytest.raises(RuntimeError):
            await _start_twice(runtime)
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: done == [record.id])
        assert runtime.health().healthy


async def _start_twice(runtime: Any) -> None:
    await runtime.start()
    await runtime.start()


class _WarmingEngine(InMemoryEngine):
    """An engine with the optional warm-up hook, recording its calls."""

    def __init__(self, *, fail: bool) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.warmed: list[list[str]] = []
        self.claims_at_warm_up: int | None = None
        self.claims = 0
        self._fail = fail

    async def warm_up(self, queues: Sequence[str]) -> None:
        self.warmed.append(list(queues))
        self.claims_at_warm_up = self.claims
        if self._fail:
            raise RuntimeError("the database is not there yet")

    async def claim(self, queue: str, **kwargs: Any) -> Any:
        self.claims += 1
        return await super().claim(queue, **kwargs)


@pytest.mark.parametrize("fail", [False, True])
async def test_start_warms_the_engine_up_before_claiming_and_survives_a_failed_warm_up(
    fail: bool,
) -> None:
    engine = _WarmingEngine(fail=fail)
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler, queue="a")
    handlers.register("k2", handler, queue="b")
    async with running(engine, handlers):
        assert sorted(engine.warmed[0]) == ["a", "b"] and len(engine.warmed) == 1
        assert engine.claims_at_warm_up == 0
        [record] = await enqueue(engine, "k", queue="a")
        await wait_until(lambda: done == [record.id])


class _SubscribingAfterWarmUp(_WarmingEngine):
    """The listener's subscription waits until the warm-up has begun."""

    def __init__(self) -> None:
        super().__init__(fail=False)
        self.warm_up_began = anyio.Event()

    async def warm_up(self, queues: Sequence[str]) -> None:
        self.warm_up_began.set()
        await super().warm_up(queues)

    async def subscribe(self, channels: list[str]) -> Any:
        await self.warm_up_began.wait()
        return await super().subscribe(channels)


async def test_the_warm_up_goes_on_while_the_listener_subscribes() -> None:
    """The warm-up (opening and planning connections) does not wait for the listener's
    subscription: a subscription that only completes once the warm-up has begun does
    not keep the runtime from starting."""
    engine = _SubscribingAfterWarmUp()
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler)
    async with running(engine, handlers):
        assert engine.warmed == [["default"]] and engine.claims_at_warm_up == 0
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: done == [record.id])


async def test_a_late_completion_refused_by_the_run_lease_guard_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    handlers = HandlerRegistry()
    started: list[AttemptContext] = []
    finish = anyio.Event()

    async def handler(ctx: AttemptContext) -> None:
        started.append(ctx)
        await finish.wait()  # ignores the cancel flag: it finishes late, after the rescue

    handlers.register("k", handler)
    # No deadline: the runtime would cut the handler off at it (awa.runtime.deadlines).
    no_deadline = [{"name": "default", "deadline_duration_ms": 0}]
    config = fast_config(handlers, no_deadline, heartbeat_rescue_interval_ms=60_000)
    caplog.set_level("INFO", logger="awa.runtime.executor")
    async with running(engine, handlers, config, leader=False):
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: started)
        clock.advance(timedelta(minutes=10))
        await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=90))
        current = (await job(engine, record.id)).run_lease
        finish.set()
        await wait_until(lambda: any("run-lease guard" in r.message for r in caplog.records))
    refused = [r for r in caplog.records if "run-lease guard" in r.message]
    assert len(refused) == 1 and refused[0].levelname == "INFO"
    message = refused[0].getMessage()
    assert f"job {record.id}: Complete refused" in message
    assert f"held run lease {started[0].lease.lease}" in message
    assert f"run lease is now {current} (state retryable" in message
    assert (await job(engine, record.id)).state == JobState.Retryable


async def test_a_handler_task_cancelled_before_its_first_step_leaves_no_coroutine_unawaited() -> (
    None
):
    """A script's exception cancels every task at once, some before they ran: the runtime
    closes their coroutines, so the script's traceback is not followed by a warning."""
    engine = make_engine()
    handlers = HandlerRegistry()

    async def handler(ctx: AttemptContext) -> None:
        return None

    handlers.register("k", handler)
    runtime = Runtime(
        engine,
        engine,
        None,
        clock_of(engine),
        handlers,
        fast_config(handlers),
        control=inmemory_control_plane(engine, engine._clock),
    )
    await enqueue(engine, "k")
    [claim] = await engine.claim("default", limit=1)
    # The task never runs, so its executor is never called.
    runtime._executor = cast(Any, object())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with anyio.create_task_group() as work:
            runtime._work = work
            before = asyncio.all_tasks()
            runtime._spawn("default", claim)
            # asyncio.run, on the script's exception, cancels every task as this does
            [spawned] = asyncio.all_tasks() - before
            spawned.cancel()
        runtime._close_unstarted()
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
