"""Notices when something blocks the worker's event loop, and says which handler.

An ``async def`` handler that calls something blocking (``time.sleep``, a synchronous
driver, heavy CPU work) stops every other coroutine of the loop: claims, completions,
other handlers. Heartbeats and maintenance run on threads of their own and keep going,
but the operator still needs to know which handler to fix. A task on the loop ticks a
timestamp; a thread watches it and, once no tick came for longer than the threshold,
logs a WARNING naming the task the loop is running (the handler's kind, job id and
queue when it is an attempt), and another when the loop is free again.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio

from awa.ports.clock import Clock
from awa.runtime.context import AttemptContext
from awa.runtime.inflight import InFlight

log = logging.getLogger("awa.runtime.loop")

#: A loop that did not come round for this long is reported.
BLOCK_THRESHOLD = 1.0
#: How often the loop ticks (and the watcher looks).
TICK = 0.1
_ADVICE = (
    "an async handler is calling blocking code; make it a plain `def` handler (it runs "
    "in a thread) or await instead of blocking."
)


class LoopWatchdog:
    """Run :meth:`run` on the loop to watch; it starts and stops its watcher thread."""

    def __init__(
        self,
        inflight: InFlight,
        *,
        clock: Clock,
        threshold: float = BLOCK_THRESHOLD,
        tick: float = TICK,
    ) -> None:
        self._inflight = inflight
        self._clock = clock
        self._threshold = threshold
        self._tick = tick
        self._last_tick = self._clock.monotonic()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: how many blocks were reported (observability, tests)
        self.blocks = 0

    async def run(self) -> None:
        """Tick until cancelled, while the watcher thread looks for missed ticks."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: no task to name, nothing to watch
            await anyio.sleep_forever()
        self._stop.clear()
        self._last_tick = self._clock.monotonic()
        watcher = threading.Thread(target=self._watch, name="awa-loop-watchdog", daemon=True)
        watcher.start()
        try:
            while True:
                self._last_tick = self._clock.monotonic()
                await self._clock.sleep(self._tick)
        finally:
            self._stop.set()
            watcher.join(1.0)

    def _culprit(self) -> str:
        """What the loop is running now: the attempt's handler, or the task's name."""
        assert self._loop is not None
        task = asyncio.current_task(self._loop)
        if task is None:
            return "no task (a loop callback)"
        for context in self._inflight.snapshot():
            if context.task is task:
                return describe_attempt(context)
        return f"task {task.get_name()!r} ({task.get_coro()!r})"

    def _watch(self) -> None:
        blocked_since: float | None = None
        culprit = ""
        while not self._clock.wait_blocking(self._stop, self._tick):
            last = self._last_tick
            stalled = self._clock.monotonic() - last
            if blocked_since is None and stalled > self._threshold + self._tick:
                blocked_since = last
                culprit = self._culprit()
                self.blocks += 1
                log.warning(
                    "the event loop has been blocked for %.1f s by %s: %s Claims and "
                    "completions on this worker wait meanwhile; heartbeats and maintenance "
                    "go on.",
                    stalled,
                    culprit,
                    _ADVICE
                    if culprit.startswith("handler ")
                    else "if this process was not stopped (SIGSTOP, a paused container), "
                    "something on the loop calls blocking code.",
                )
            elif blocked_since is not None and last > blocked_since:
                log.warning(
                    "the event loop is running again after %.1f s blocked by %s",
                    last - blocked_since,
                    culprit,
                )
                blocked_since = None


def describe_attempt(context: AttemptContext) -> str:
    """``handler kind=<kind> job <id> attempt <n> (queue <queue>)``."""
    job = context.record
    return f"handler kind={job.kind} job {job.id} attempt {job.attempt} (queue {context.queue})"
