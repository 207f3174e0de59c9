"""A re-armable wake-up signal for loops that otherwise sleep for a poll interval."""

from __future__ import annotations

import anyio

from awa.ports.clock import Clock


class Waker:
    """Wakes one waiting loop. A wake that arrives while nobody waits is remembered, so
    the next :meth:`wait` returns at once (no lost wake-ups between loop iterations).
    Timeouts are measured on ``clock``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event: anyio.Event | None = None
        self._pending = False

    def wake(self) -> None:
        self._pending = True
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait until woken or ``timeout`` seconds pass; returns whether it was woken."""
        if not self._pending:
            self._event = anyio.Event()
            with self._clock.move_on_after(max(timeout, 0.0)):
                await self._event.wait()
            self._event = None
        woken = self._pending
        self._pending = False
        return woken
