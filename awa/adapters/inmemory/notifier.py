"""In-process notifications and leader election for the in-memory engine."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import anyio

from awa.domain.leadership import Lease
from awa.ports.clock import Clock


class InMemorySubscription:
    """Channels fired since the last :meth:`wait`, kept until collected."""

    def __init__(self, hub: NotificationHub, channels: Iterable[str]) -> None:
        self._hub = hub
        self.channels = frozenset(channels)
        self._pending: set[str] = set()
        self._wakeup: anyio.Event | None = None
        self._closed = False

    def _deliver(self, channels: set[str]) -> None:
        fired = channels & self.channels
        if not fired or self._closed:
            return
        self._pending |= fired
        if self._wakeup is not None:
            self._wakeup.set()

    async def wait(self, timeout: float) -> set[str]:
        """Return the fired channels, waiting up to ``timeout`` seconds for the first one."""
        if not self._pending and not self._closed and timeout > 0:
            self._wakeup = anyio.Event()
            try:
                with anyio.move_on_after(timeout):
                    await self._wakeup.wait()
            finally:
                self._wakeup = None
        fired, self._pending = self._pending, set()
        return fired

    async def close(self) -> None:
        self._closed = True
        self._pending.clear()
        self._hub._unsubscribe(self)
        if self._wakeup is not None:
            self._wakeup.set()


class NotificationHub:
    """Fan-out of channel names to every open subscription listening on them."""

    def __init__(self) -> None:
        self._subscriptions: list[InMemorySubscription] = []

    async def subscribe(self, channels: list[str]) -> InMemorySubscription:
        subscription = InMemorySubscription(self, channels)
        self._subscriptions.append(subscription)
        return subscription

    def publish(self, channels: Iterable[str]) -> None:
        fired = set(channels)
        if not fired:
            return
        for subscription in list(self._subscriptions):
            subscription._deliver(fired)

    async def close(self) -> None:
        for subscription in list(self._subscriptions):
            await subscription.close()

    def _unsubscribe(self, subscription: InMemorySubscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)


class LeaderElection:
    """The single leadership lease shared by every :class:`InMemoryLeaderLock` over it."""

    def __init__(self) -> None:
        self.holder: InMemoryLeaderLock | None = None
        self.expires_at: datetime | None = None
        self.term = 0

    def revoke(self) -> None:
        """Drop the current leader, as a lease that ran out would."""
        self.holder = None
        self.expires_at = None

    def current(self, now: datetime) -> InMemoryLeaderLock | None:
        """The holder whose lease has not ended at ``now``."""
        if self.holder is not None and self.expires_at is not None and now < self.expires_at:
            return self.holder
        return None


class InMemoryLeaderLock:
    """One candidate's handle on a :class:`LeaderElection`: the lease is taken when free
    or ended, renewed by its holder, and ends ``ttl`` after the last renewal on the
    engine's clock."""

    def __init__(self, election: LeaderElection, clock: Clock) -> None:
        self._election = election
        self._clock = clock
        self.name = f"candidate-{id(self):x}"

    async def try_acquire(self, ttl: float) -> Lease:
        election = self._election
        now = self._clock.now()
        holder = election.current(now)
        if holder is not None and holder is not self:
            assert election.expires_at is not None
            remaining = (election.expires_at - now).total_seconds()
            return Lease(held=False, expires_in=remaining, term=election.term, holder=holder.name)
        if holder is None:
            election.term += 1
        election.holder = self
        election.expires_at = now + timedelta(seconds=ttl)
        return Lease(held=True, expires_in=ttl, term=election.term, holder=self.name)

    async def still_held(self) -> bool:
        return self._election.current(self._clock.now()) is self

    async def release(self) -> None:
        if self._election.holder is self:
            self._election.revoke()
