"""The clock port's two adapters: the manual clock wakes sleepers, deadlines and thread
waits when (and only when) it is advanced, in due order; the system clock keeps anyio's
and the host's semantics."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from awa.adapters.clock import ManualClock, SystemClock
from awa.ports.clock import Clock

pytestmark = pytest.mark.anyio


def test_both_adapters_satisfy_the_port() -> None:
    clocks: list[Clock] = [SystemClock(), ManualClock()]
    assert all(c.now().tzinfo is not None for c in clocks)


async def test_sleepers_wake_in_due_order_when_advanced() -> None:
    clock = ManualClock()
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    async with anyio.create_task_group() as tg:
        for name, seconds in (("c", 3.0), ("a", 1.0), ("b", 2.0), ("b2", 2.0)):
            tg.start_soon(sleeper, name, seconds)
        await clock.settle()
        assert clock.pending == 4
        clock.advance(0.999)
        await clock.settle()
        assert woke == []
        clock.advance(5)
        await clock.settle()
    assert woke == ["a", "b", "b2", "c"]
    assert clock.pending == 0


async def test_advance_moves_wall_and_monotonic_time_together() -> None:
    clock = ManualClock(datetime(2031, 5, 1, tzinfo=UTC))
    start = clock.monotonic()
    assert clock.advance(timedelta(seconds=90)) == datetime(2031, 5, 1, 0, 1, 30, tzinfo=UTC)
    assert clock.monotonic() == start + 90
    clock.set(datetime(2031, 4, 1, tzinfo=UTC))  # the wall clock may jump back
    assert clock.monotonic() == start + 90
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        await clock.elapse(-1)


async def test_elapse_runs_woken_tasks_at_each_due_instant() -> None:
    """A loop that sleeps 1 s and re-arms runs exactly 10 times in 10.5 s, each tick at
    its own instant (a plain jump would wake it once)."""
    clock = ManualClock()
    start = clock.monotonic()
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            await clock.sleep(1.0)
            ticks.append(clock.monotonic() - start)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await clock.elapse(10.5)
        tg.cancel_scope.cancel()
    assert ticks == [float(n) for n in range(1, 11)]


async def test_move_on_after_cancels_at_its_deadline_only() -> None:
    clock = ManualClock()
    finished = anyio.Event()
    caught: list[bool] = []

    async def bounded() -> None:
        with clock.move_on_after(5.0) as scope:
            await anyio.sleep_forever()
        caught.append(scope.cancelled_caught)
        finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(bounded)
        await clock.elapse(4.9)
        assert caught == []
        await clock.elapse(0.1)
        await finished.wait()
    assert caught == [True]
    # a body that finishes first disarms its deadline
    with clock.move_on_after(5.0) as scope:
        await anyio.lowlevel.checkpoint()
    assert not scope.cancelled_caught and clock.pending == 0
    with clock.move_on_after(0) as scope:
        await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    with clock.move_on_after(math.inf) as scope:
        await clock.elapse(10**6)
    assert not scope.cancelled_caught


async def test_wait_blocking_returns_when_advanced_from_another_thread() -> None:
    clock = ManualClock()
    stop = threading.Event()
    results: list[bool] = []

    def waiter() -> None:
        results.append(clock.wait_blocking(stop, 2.0))

    thread = threading.Thread(target=waiter)
    thread.start()
    while clock.pending == 0:
        await anyio.to_thread.run_sync(threading.Event().wait, 0.001)
    clock.advance(1.0)
    assert thread.is_alive()
    clock.advance(1.0)
    await anyio.to_thread.run_sync(thread.join)
    assert results == [False]
    stop.set()
    assert clock.wait_blocking(stop, 60.0) is True


async def test_autojump_runs_hours_of_timers_without_waiting() -> None:
    clock = ManualClock()
    start = clock.monotonic()
    order: list[str] = []

    async def after(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        order.append(name)

    async with clock.autojump(), anyio.create_task_group() as tg:
        tg.start_soon(after, "hour", 3600.0)
        tg.start_soon(after, "minute", 60.0)
        with clock.move_on_after(7200.0) as scope:
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert order == ["minute", "hour"]
    assert clock.monotonic() - start == 7200.0


async def test_a_sleeper_on_another_event_loop_is_woken_there() -> None:
    clock = ManualClock()
    done = threading.Event()

    def other_loop() -> None:
        async def body() -> None:
            await clock.sleep(30.0)
            done.set()

        anyio.run(body)

    thread = threading.Thread(target=other_loop)
    thread.start()
    while clock.pending == 0:
        await anyio.to_thread.run_sync(threading.Event().wait, 0.001)
    assert not done.is_set()
    clock.advance(30.0)
    await anyio.to_thread.run_sync(thread.join)
    assert done.is_set()


async def test_system_clock_waits_on_the_host() -> None:
    clock = SystemClock()
    before = clock.monotonic()
    await clock.sleep(0)
    with clock.move_on_after(0) as scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught
    stop = threading.Event()
    stop.set()
    assert clock.wait_blocking(stop, 60.0) is True
    assert clock.wait_blocking(threading.Event(), 0) is False
    assert clock.monotonic() >= before
