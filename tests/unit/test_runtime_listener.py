"""One subscription per runtime: every queue's wake-ups and the cancels, routed."""

from __future__ import annotations

import logging
import math
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.runtime import AttemptContext, HandlerRegistry, Runtime
from awa.runtime import listener as listener_module
from awa.runtime.listener import ChannelListener
from tests.unit.test_runtime_support import (
    REAL_TIME_GUARD,
    clock_of,
    enqueue,
    fast_config,
    make_engine,
    on_clock,
    sleep,
    wait_until,
    within,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

# Claim loops that poll this rarely pick a job up within a second only when woken.
_SLOW_POLL_MS = 20_000


class _RecordingNotifier:
    """The engine's notifier, recording each subscription's channels. Once :meth:`break_`
    is called, a subscription fails its wait (the connection dropped); while ``refuse``
    is set, subscribing fails."""

    def __init__(self, engine: InMemoryEngine) -> None:
        self._engine = engine
        self.subscribed: list[list[str]] = []
        self.broken = anyio.Event()
        self.refuse = False

    def break_(self) -> None:
        self.broken.set()

    def mend(self) -> None:
        self.broken = anyio.Event()

    async def subscribe(self, channels: list[str]) -> Any:
        if self.refuse:
            raise ConnectionError("connection refused")
        self.subscribed.append(list(channels))
        inner = await self._engine.subscribe(channels)
        notifier = self

        class Subscription:
            async def wait(self, timeout: float) -> set[str]:
                fired: set[str] = set()
                broken = notifier.broken

                async def listen() -> None:
                    nonlocal fired
                    fired = await inner.wait(timeout)
                    tg.cancel_scope.cancel()

                async def until_broken() -> None:
                    await broken.wait()
                    tg.cancel_scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(listen)
                    tg.start_soon(until_broken)
                if broken.is_set():
                    raise ConnectionError("server closed the connection unexpectedly")
                return fired

            async def close(self) -> None:
                await inner.close()

        return Subscription()


def _recording(done: list[tuple[str, int]]) -> Any:
    async def handler(ctx: AttemptContext) -> None:
        done.append((ctx.queue, ctx.lease.job_id))

    return handler


async def test_one_subscription_wakes_every_queue_and_answers_cancels() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[tuple[str, int]] = []
    started: list[AttemptContext] = []

    async def until_cancelled(ctx: AttemptContext) -> None:
        started.append(ctx)
        with within(5):
            while not ctx.is_cancelled():
                await sleep(0.005)

    for queue in ("a", "b", "c"):
        handlers.register(f"k{queue}", _recording(done), queue=queue)
    handlers.register("slow", until_cancelled, queue="c")
    notifier = _RecordingNotifier(engine)
    # Polls and heartbeats far apart: only notifications explain quick pickups and a
    # quick cancel.
    config = fast_config(handlers, poll_interval_ms=_SLOW_POLL_MS, heartbeat_interval_ms=60_000)
    runtime = Runtime(engine, notifier, None, clock_of(engine), handlers, config)
    async with on_clock(clock_of(engine), runtime):
        await _one_subscription(runtime, engine, notifier, done, started)


async def _one_subscription(
    runtime: Runtime,
    engine: InMemoryEngine,
    notifier: _RecordingNotifier,
    done: list[tuple[str, int]],
    started: list[AttemptContext],
) -> None:
    await runtime.start()
    try:
        assert notifier.subscribed == [["awa:a", "awa:b", "awa:c", "awa:cancel"]]
        # the claim loops' first claims, on start, found nothing; they now sleep
        await sleep(0.1)
        jobs = [(q, (await enqueue(engine, f"k{q}", queue=q))[0].id) for q in ("a", "b", "c")]
        await wait_until(lambda: sorted(done) == sorted(jobs), timeout=1.0)
        [slow] = await enqueue(engine, "slow", queue="c")
        await wait_until(lambda: started, timeout=1.0)
        await engine.cancel_job(slow.id)
        await wait_until(started[0].is_cancelled, timeout=1.0)
        assert len(notifier.subscribed) == 1
    finally:
        await runtime.shutdown(1000)


async def test_a_lost_subscription_is_taken_again_and_every_route_woken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listener_module, "RESUBSCRIBE_MIN", 0.05)
    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[tuple[str, int]] = []
    handlers.register("k", _recording(done), queue="q")
    notifier = _RecordingNotifier(engine)
    config = fast_config(handlers, poll_interval_ms=_SLOW_POLL_MS)
    runtime = Runtime(engine, notifier, None, clock_of(engine), handlers, config)
    async with on_clock(clock_of(engine), runtime):
        await _lost_subscription(runtime, engine, notifier, done, caplog)


async def _lost_subscription(
    runtime: Runtime,
    engine: InMemoryEngine,
    notifier: _RecordingNotifier,
    done: list[tuple[str, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    await runtime.start()
    try:
        listener = runtime.listener
        assert listener is not None and listener.listening
        await sleep(0.1)
        with caplog.at_level(logging.WARNING, logger="awa.runtime.listener"):
            notifier.refuse = True
            notifier.break_()
            await wait_until(lambda: not listener.listening, timeout=1.0)
            # Enqueued while nobody listens: its announcement is lost.
            [record] = await enqueue(engine, "k", queue="q")
            await sleep(0.2)
            assert done == []
            notifier.refuse = False
            notifier.mend()
            # Taken again, the subscription wakes every claim loop once.
            await wait_until(lambda: done == [("q", record.id)], timeout=1.0)
        assert listener.listening and listener.subscriptions == 2
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("notifications lost (awa:q, awa:cancel)") for m in messages)
        # Every refused LISTEN is counted, only the first one is logged (log_throttle).
        refused = [m for m in messages if m.startswith("LISTEN failed")]
        assert len(refused) == 1 and " on awa:q, awa:cancel; polling only" in refused[0]
    finally:
        await runtime.shutdown(1000)


async def test_routes_are_called_once_per_notification_and_never_block() -> None:
    engine = make_engine()
    listener = ChannelListener(engine, clock=clock_of(engine))
    calls: list[str] = []
    listener.route(["awa:a", "awa:a#1"], lambda: calls.append("a"))
    listener.route(["awa:b"], lambda: calls.append("b"))
    async with on_clock(clock_of(engine)), anyio.create_task_group() as tg:
        await tg.start(listener.run)
        engine._hub.publish(["awa:a", "awa:a#1"])
        await wait_until(lambda: calls, timeout=1.0)
        await sleep(0.05)
        # two channels of the same route fired together: one call
        assert calls == ["a"]
        engine._hub.publish(["awa:b", "awa:other"])
        await wait_until(lambda: calls == ["a", "b"], timeout=1.0)
        tg.cancel_scope.cancel()
    assert not listener.listening


class _HostTimedSubscription:
    """A subscription that measures the timeout it is given on the host (as a notifier
    over a network does) and records each wait's timeout; nothing ever fires."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def wait(self, timeout: float) -> set[str]:
        self.waits.append(timeout)
        with anyio.move_on_after(timeout):
            await anyio.sleep_forever()
        return set()

    async def close(self) -> None:
        return None


async def test_the_wait_for_notifications_is_bounded_on_the_runtimes_clock() -> None:
    # The listener renews its wait every WAIT_SECONDS of the runtime's clock, whatever
    # the notifier measures time with: on a manual clock, the renewal comes when the
    # clock says so and not a moment before, and no bound is left to the host's time.
    clock = ManualClock()
    subscription = _HostTimedSubscription()

    class Notifier:
        async def subscribe(self, channels: list[str]) -> _HostTimedSubscription:
            return subscription

    listener = ChannelListener(Notifier(), clock=clock)
    listener.route(["awa:q"], lambda: None)
    with anyio.fail_after(REAL_TIME_GUARD):
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)
            await clock.elapse(listener_module.WAIT_SECONDS - 0.5)
            assert len(subscription.waits) == 1
            await clock.elapse(0.5)
            assert len(subscription.waits) == 2
            await clock.elapse(listener_module.WAIT_SECONDS)
            assert len(subscription.waits) == 3
            assert subscription.waits == [math.inf] * 3
            assert listener.listening and listener.subscriptions == 1
            tg.cancel_scope.cancel()
