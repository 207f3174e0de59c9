"""Time as a dependency: the wall clock engines stamp writes with, and every timer the
runtime waits on (sleeps, deadlines, a thread's pause), so tests can run it all on a
manual clock (ADR 0025)."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

import anyio


class Clock(Protocol):
    """Wall time, monotonic time and the waits measured on them.

    A real clock measures both on the host. A manual clock moves only when told to, and
    wakes every sleeper, deadline and thread wait that became due, in due order (the
    earliest first; equal instants in the order they were armed).
    """

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC. Engines stamp every write with it."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (an arbitrary origin): what the
        runtime measures intervals, leases and deadlines with. Readable from any thread."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` of this clock (a checkpoint only for ``<= 0``).
        Cancellable like :func:`anyio.sleep`."""
        ...

    def move_on_after(self, seconds: float) -> AbstractContextManager[anyio.CancelScope]:
        """A cancel scope cancelled once ``seconds`` of this clock passed, as
        :func:`anyio.move_on_after` (``scope.cancelled_caught`` tells whether it was).
        ``math.inf`` never expires."""
        ...

    def wait_blocking(self, stop: threading.Event, seconds: float) -> bool:
        """For a thread of its own (heartbeats, the loop watchdog): block until ``stop``
        is set or ``seconds`` of this clock passed; True when ``stop`` was set."""
        ...
