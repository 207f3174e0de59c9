"""Clock adapters: the system clock, and a manual clock for tests and models whose
timers fire only when it is advanced (ADR 0025)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel


class SystemClock:
    """The host's clocks: ``datetime.now(UTC)``, ``time.monotonic()`` and anyio's waits."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    def move_on_after(self, seconds: float) -> anyio.CancelScope:
        return anyio.move_on_after(seconds)

    def wait_blocking(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(max(seconds, 0.0))


#: How often a thread blocked in ManualClock.wait_blocking looks at its stop event (the
#: clock's own wake-ups reach it at once; a stop set elsewhere cannot notify it).
_STOP_GRAIN = 0.01
#: Where a manual clock's monotonic reading starts (not 0.0, which code may test as unset).
_MONOTONIC_START = 1000.0

Busy = Callable[[], bool]


class _Timer:
    """One armed wait: ``fire`` runs once the clock reaches ``due``, on the event loop
    that armed it (``loop``), or at once for a thread's wait (``loop`` is None)."""

    __slots__ = ("cancelled", "due", "fire", "loop")

    def __init__(
        self, due: float, fire: Callable[[], object], loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.due = due
        self.fire = fire
        self.loop = loop
        self.cancelled = False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ManualClock:
    """A clock that only moves when told to. Starts at a fixed instant by default.

    :meth:`advance` moves wall and monotonic time together and fires every timer that
    became due, earliest first (equal instants in the order armed): sleepers return,
    ``move_on_after`` scopes are cancelled, threads in :meth:`wait_blocking` go on. From
    a test on the event loop, ``await`` :meth:`elapse` instead to step through the due
    instants one by one, letting the woken tasks run at each (:meth:`settle`), or run the
    code under test inside :meth:`autojump`, which moves the clock to the next timer
    whenever every task waits. :meth:`set` moves only the wall clock, as the host's can.
    Safe to advance from any thread.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._mono = _MONOTONIC_START
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self._lock = threading.RLock()
        self._armed: anyio.Event | None = None
        self._jumping = False
        self._busy: list[Busy] = []

    # ----------------------------------------------------------------- readings
    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def next_due(self) -> float | None:
        """The monotonic instant of the earliest armed timer, or None when none is."""
        with self._lock:
            self._drop_cancelled()
            return self._timers[0][0] if self._timers else None

    @property
    def pending(self) -> int:
        """How many timers are armed (sleepers, deadlines and thread waits)."""
        with self._lock:
            return sum(1 for _, _, t in self._timers if not t.cancelled)

    # ----------------------------------------------------------------- moving it
    def advance(self, delta: timedelta | float) -> datetime:
        """Move both clocks forward by ``delta`` and fire what became due; returns the
        new instant. Woken tasks run once the caller yields to the event loop."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0 or math.isnan(seconds):
            raise ValueError("a clock cannot go backwards")
        self._move_to(self._mono + seconds)
        self._fire_due()
        return self._now

    def set(self, instant: datetime) -> None:
        """Set the wall clock (either way); the monotonic clock and its timers stay."""
        if instant.tzinfo is None:
            raise ValueError("instant must be timezone-aware")
        self._now = instant

    async def elapse(self, delta: timedelta | float, *, busy: Busy | None = None) -> None:
        """Let ``delta`` pass as if in real time, on the event loop: at each due instant in
        turn the clock stops, fires what is due there and lets every task run until it
        waits again (so a timer armed by a woken task is honoured too)."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0 or math.isnan(seconds):
            raise ValueError("a clock cannot go backwards")
        target = self._mono + seconds
        await self.settle(busy=busy)
        while (due := self.next_due()) is not None and due <= target:
            self._move_to(due)
            self._fire_due()
            await self.settle(busy=busy)
        self._move_to(target)
        await self.settle(busy=busy)

    async def settle(self, *, busy: Busy | None = None) -> None:
        """Return once every other task of this event loop waits on something (and
        ``busy``, when given, answers False: say, no handler thread is running)."""
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        while True:
            await asyncio.sleep(0)
            if busy is not None and busy():
                # a thread is working: give it real time rather than spin
                await asyncio.sleep(0.001)
                continue
            if all(_waits(task) for task in asyncio.all_tasks(loop) if task is not me):
                # one more turn: a callback scheduled by the last step may wake a task
                await asyncio.sleep(0)
                if all(_waits(task) for task in asyncio.all_tasks(loop) if task is not me):
                    return

    @contextlib.asynccontextmanager
    async def autojump(self, *, busy: Busy | None = None) -> AsyncIterator[None]:
        """Inside, whenever every task waits (and no ``busy`` answers True), the clock
        jumps to the next due timer: code that waits on timers runs in simulated time, as
        fast as the host allows and in the same order however loaded it is. Nested uses
        (two runtimes on one clock) share one jumper and add their ``busy``."""
        if busy is not None:
            self._busy.append(busy)
        try:
            if self._jumping:
                yield
                return
            self._jumping = True
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._jump)
                    try:
                        yield
                    finally:
                        tg.cancel_scope.cancel()
            finally:
                self._jumping = False
        finally:
            if busy is not None:
                self._busy.remove(busy)

    def _any_busy(self) -> bool:
        return any(busy() for busy in self._busy)

    async def _jump(self) -> None:
        while True:
            await self.settle(busy=self._any_busy)
            due = self.next_due()
            if due is None:
                self._armed = anyio.Event()
                await self._armed.wait()
                continue
            self._move_to(due)
            self._fire_due()

    # ----------------------------------------------------------------- waiting on it
    async def sleep(self, seconds: float) -> None:
        if seconds <= 0 or math.isnan(seconds):
            await anyio.lowlevel.checkpoint()
            return
        if math.isinf(seconds):
            await anyio.sleep_forever()
        event = anyio.Event()
        timer = self._arm(seconds, event.set, _running_loop())
        try:
            await event.wait()
        finally:
            timer.cancelled = True

    @contextlib.contextmanager
    def move_on_after(self, seconds: float) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            timer: _Timer | None = None
            if seconds <= 0 or math.isnan(seconds):
                scope.cancel()
            elif not math.isinf(seconds):
                timer = self._arm(seconds, scope.cancel, _running_loop())
            try:
                yield scope
            finally:
                if timer is not None:
                    timer.cancelled = True

    def wait_blocking(self, stop: threading.Event, seconds: float) -> bool:
        if stop.is_set() or seconds <= 0 or math.isnan(seconds):
            return stop.is_set()
        due = threading.Event()
        timer = None if math.isinf(seconds) else self._arm(seconds, due.set, None)
        try:
            while not due.is_set():
                if stop.wait(_STOP_GRAIN):
                    return True
            return stop.is_set()
        finally:
            if timer is not None:
                timer.cancelled = True

    # ----------------------------------------------------------------- internals
    def _arm(
        self, seconds: float, fire: Callable[[], object], loop: asyncio.AbstractEventLoop | None
    ) -> _Timer:
        with self._lock:
            # strictly later, even when ``seconds`` is below the float's resolution here:
            # a wait is never due at the instant it was armed
            due = max(self._mono + seconds, math.nextafter(self._mono, math.inf))
            timer = _Timer(due, fire, loop)
            heapq.heappush(self._timers, (timer.due, next(self._order), timer))
            armed = self._armed
        if armed is not None and loop is not None and loop is _running_loop():
            armed.set()
        return timer

    def _move_to(self, instant: float) -> None:
        with self._lock:
            if instant > self._mono:
                self._now += timedelta(seconds=instant - self._mono)
                self._mono = instant

    def _drop_cancelled(self) -> None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)

    def _fire_due(self) -> None:
        while True:
            with self._lock:
                self._drop_cancelled()
                if not self._timers or self._timers[0][0] > self._mono:
                    return
                _, _, timer = heapq.heappop(self._timers)
                timer.cancelled = True
            if timer.loop is None or timer.loop is _running_loop():
                timer.fire()
            else:
                with contextlib.suppress(RuntimeError):  # that loop has closed
                    timer.loop.call_soon_threadsafe(timer.fire)


def _waits(task: asyncio.Task[object]) -> bool:
    """Whether ``task`` is suspended on a future that is not done yet (anyio's testing
    helper ``wait_all_tasks_blocked`` reads the same attribute)."""
    waiter = getattr(task, "_fut_waiter", None)
    return waiter is not None and not waiter.done()
