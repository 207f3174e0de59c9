"""One subscription per runtime: every queue's wake-ups and the cancels.

A worker listens on ``awa:<queue>`` (and its stripes' channels) for each queue it serves
and on ``awa:cancel``. Each subscription of the Postgres notifier is a connection of its
own, and on Postgres 15 every NOTIFY in a database wakes every listening backend of that
database, whatever it listens on. So the runtime takes one subscription for all of its
channels and routes what fires: one connection and one woken backend per worker per
notification, however many queues it serves.

When the notifier finds that notifications cannot arrive at all (a pooler in transaction
mode: :class:`~awa.domain.errors.WakeupsUnavailable`), the runtime says so once at
WARNING, counts ``awa.wakeups.polling_fallbacks`` and stops trying: its loops wake by
polling at ``poll_interval`` (:attr:`ChannelListener.wakeups` is ``"polling"``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

import anyio
from anyio.abc import TaskStatus

from awa.domain.errors import WakeupsUnavailable
from awa.ports.clock import Clock
from awa.ports.notifier import Notifier, Subscription
from awa.runtime import metrics
from awa.runtime.log_throttle import FailureLog

log = logging.getLogger("awa.runtime.listener")

RESUBSCRIBE_MIN = 0.5
RESUBSCRIBE_MAX = 30.0
#: How long one wait for notifications lasts, on the runtime's clock, before it is renewed
#: (it only bounds the wait; nothing happens on a timeout).
WAIT_SECONDS = 30.0

Route = Callable[[], None]

#: :attr:`ChannelListener.wakeups` values.
LISTEN = "listen"
POLLING = "polling"


class ChannelListener:
    """Keeps one subscription to every routed channel, re-subscribing with a capped
    backoff after a failure, and calls the routes of each channel that fires.

    Routes must not block: they set a flag or wake a loop. After a subscription is lost,
    every route is called once the next one is in place, since what was announced
    meanwhile was not heard. While no subscription holds, the routed loops poll.
    """

    def __init__(self, notifier: Notifier, *, clock: Clock) -> None:
        self._notifier = notifier
        self._clock = clock
        self._routes: dict[str, list[Route]] = {}
        #: Whether a subscription is in place now.
        self.listening = False
        #: Subscriptions taken, the first included.
        self.subscriptions = 0
        self._subscribe_failures = FailureLog(log, "LISTEN", clock=clock.monotonic)
        #: Why notifications cannot arrive, once the notifier found out (then for good).
        self.unavailable: str | None = None

    @property
    def wakeups(self) -> str:
        """``"listen"`` while notifications wake the loops, else ``"polling"``."""
        return LISTEN if self.listening else POLLING

    def route(self, channels: Iterable[str], call: Route) -> None:
        """Call ``call`` whenever one of ``channels`` fires (add before :meth:`run`)."""
        for channel in channels:
            calls = self._routes.setdefault(channel, [])
            if call not in calls:
                calls.append(call)

    @property
    def channels(self) -> list[str]:
        return list(self._routes)

    def _fire(self, channels: Iterable[str]) -> None:
        called: list[Route] = []
        for channel in channels:
            for call in self._routes.get(channel, ()):
                if call not in called:
                    called.append(call)
                    call()

    def _fire_all(self) -> None:
        self._fire(self._routes)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled. Reports started after the first attempt to subscribe,
        whether it succeeded or not (the routed loops poll meanwhile)."""
        started = False
        delay = RESUBSCRIBE_MIN
        while True:
            if not self._routes:
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep_forever()
            try:
                subscription = await self._notifier.subscribe(self.channels)
            except WakeupsUnavailable as exc:
                self._fall_back(exc.reason)
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep_forever()
            except Exception as exc:
                self._subscribe_failures.failed(
                    exc,
                    f" on {', '.join(self.channels)}; polling only, "
                    f"trying again after {delay:.1f} s (doubling up to {RESUBSCRIBE_MAX:g} s)",
                )
                if not started:
                    task_status.started()
                    started = True
                await self._clock.sleep(delay)
                delay = min(delay * 2, RESUBSCRIBE_MAX)
                continue
            self._subscribe_failures.succeeded()
            self.listening = True
            self.subscriptions += 1
            delay = RESUBSCRIBE_MIN
            if self.subscriptions > 1:
                # Anything announced while the subscription was down was not heard.
                self._fire_all()
            if not started:
                task_status.started()
                started = True
            try:
                while True:
                    fired = await self._wait(subscription)
                    if fired:
                        self._fire(fired)
            except Exception:
                log.warning(
                    "notifications lost (%s); polling only until LISTEN is back",
                    ", ".join(self.channels),
                    exc_info=True,
                )
            finally:
                self.listening = False
                with anyio.CancelScope(shield=True):
                    try:
                        await subscription.close()
                    except Exception:
                        log.debug("closing the subscription failed", exc_info=True)
            await self._clock.sleep(delay)

    async def _wait(self, subscription: Subscription) -> set[str]:
        """The channels that fired within :data:`WAIT_SECONDS` of the runtime's clock. The
        bound is the clock's, not the notifier's: the subscription waits without one of
        its own (a notification that arrives as the bound ends is kept for the next
        wait)."""
        fired: set[str] = set()
        with self._clock.move_on_after(WAIT_SECONDS):
            fired = await subscription.wait(math.inf)
        return fired

    def _fall_back(self, reason: str) -> None:
        self.unavailable = reason
        log.warning("wake-ups: polling only, notifications cannot arrive: %s", reason)
        found = metrics.instruments()
        if found is not None:
            found.count("awa.wakeups.polling_fallbacks", ())
