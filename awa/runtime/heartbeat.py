"""Heartbeats for in-flight attempts, progress flushing, and answering cancels."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread

from awa.ports.clock import Clock
from awa.ports.storage import Ack, StorageEngine
from awa.runtime import metrics
from awa.runtime.inflight import InFlight
from awa.runtime.log_throttle import FailureLog
from awa.runtime.wake import Waker

log = logging.getLogger("awa.runtime.heartbeat")

# How long answer_cancels waits before it waits again (it only bounds the wait).
_CANCEL_WAIT = 30.0

EngineFactory = Callable[[], Awaitable[StorageEngine]]


class HeartbeatService:
    """Refreshes ``heartbeat_at`` of every local attempt in one call per tick.

    A STALE answer means the attempt was rescued or cancelled elsewhere, so its cancel
    flag is flipped. Buffered progress is flushed on the same tick.

    With ``engine_factory`` the ticks run on a dedicated thread with its own event loop
    and engine, so a handler that blocks the main loop cannot starve them.
    """

    def __init__(
        self,
        engine: StorageEngine,
        inflight: InFlight,
        *,
        clock: Clock,
        interval: float,
        engine_factory: EngineFactory | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._inflight = inflight
        self._interval = interval
        self._engine_factory = engine_factory
        self._running = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.last_success: float | None = None
        self.last_error: float | None = None
        self.ticks = 0
        self._failures = FailureLog(log, "heartbeat", clock=clock.monotonic)
        self._cancels = Waker(clock)

    @property
    def alive(self) -> bool:
        if not self._running:
            return False
        if self._thread is not None:
            return self._thread.is_alive()
        return True

    @property
    def postgres_ok(self) -> bool:
        """False when the latest tick failed."""
        if self.last_error is None:
            return True
        return self.last_success is not None and self.last_success > self.last_error

    async def beat(self, engine: StorageEngine | None = None) -> None:
        """One tick: flush dirty progress, then heartbeat every in-flight lease."""
        engine = engine or self._engine
        contexts = [c for c in self._inflight.snapshot() if not c.parked]
        if not contexts:
            return
        try:
            for context in contexts:
                await context.flush_progress(engine)
            acks = await engine.heartbeat([c.lease for c in contexts])
        except Exception as exc:
            self.last_error = self._clock.monotonic()
            self._failures.failed(exc, f" for {len(contexts)} attempts")
            return
        self._failures.succeeded()
        for context, ack in zip(contexts, acks, strict=True):
            if ack is Ack.STALE:
                context.request_cancel()
        self.last_success = self._clock.monotonic()
        self.ticks += 1
        instruments = metrics.instruments()
        if instruments is not None:
            instruments.count("awa.heartbeat.batches", ())

    async def run(self) -> None:
        """Tick until cancelled (on this loop, or on the dedicated thread)."""
        self._running = True
        try:
            if self._engine_factory is None:
                while True:
                    await self._clock.sleep(self._interval)
                    await self.beat()
            else:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._thread_main, name="awa-heartbeat", daemon=True
                )
                self._thread.start()
                await anyio.sleep_forever()
        finally:
            self._running = False
            self._stop.set()
            thread, self._thread = self._thread, None
            if thread is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(thread.join, 10.0)

    def _thread_main(self) -> None:
        try:
            anyio.run(self._thread_loop)
        except Exception:
            log.exception("heartbeat thread stopped")

    async def _thread_loop(self) -> None:
        assert self._engine_factory is not None
        engine = await self._engine_factory()
        try:
            # This loop serves only heartbeats, so blocking it between ticks is fine.
            while not self._clock.wait_blocking(self._stop, self._interval):
                await self.beat(engine)
        finally:
            await engine.close()

    def cancel_announced(self) -> None:
        """``awa:cancel`` fired: heartbeat at once (:meth:`answer_cancels`), so cancelled
        attempts see their flag without waiting for the next tick."""
        self._cancels.wake()

    async def answer_cancels(self) -> None:
        """Beat each time :meth:`cancel_announced` was called, until cancelled. Cancels
        announced during a beat are answered by one more."""
        while True:
            if await self._cancels.wait(_CANCEL_WAIT):
                await self.beat()
