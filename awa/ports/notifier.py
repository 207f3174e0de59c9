"""Wake-ups for idle dispatchers (``awa:<queue>``) and running attempts (``awa:cancel``)."""

from __future__ import annotations

from typing import Protocol


class Subscription(Protocol):
    async def wait(self, timeout: float) -> set[str]:
        """Wait up to ``timeout`` seconds for notifications; return the channels that fired.

        The seconds are those of the clock the notifier was given (ADR 0025);
        ``math.inf`` waits until a notification comes or the caller cancels the wait (the
        runtime bounds its waits on its own clock so). An empty set means the timeout
        elapsed. Notifications that arrive between calls, or as a cancelled wait ends,
        are not lost: they are returned by the next call. Payloads are not delivered here.
        """
        ...

    async def close(self) -> None:
        """Stop listening and release the connection the subscription holds."""
        ...


class Notifier(Protocol):
    async def subscribe(self, channels: list[str]) -> Subscription:
        """Start listening on ``channels`` (e.g. ``awa:email``). Delivery is best effort:
        callers must also poll, so a lost notification only delays work."""
        ...
