"""Pure scheduling policies: retry backoff, priority aging, retention floors and the
queue-storage rings' seal rule with the outcomes of their upkeep steps."""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta

import attrs

from awa.domain.states import JobState

MAX_BACKOFF = timedelta(hours=24)


@attrs.frozen
class Backoff:
    """Retry delay ``min(2^attempt s + up to 25 % jitter, 24 h)``.

    ``jitter`` returns a float in ``[0, 1)``; inject a constant for deterministic tests.
    """

    jitter: Callable[[], float] = random.random
    cap: timedelta = MAX_BACKOFF

    def delay(self, attempt: int) -> timedelta:
        exponent = min(max(attempt, 0), 20)  # 2^17 s already exceeds the 24 h cap
        base = float(2**exponent)
        fraction = min(max(self.jitter(), 0.0), 1.0)
        seconds = base + base * 0.25 * fraction
        return min(timedelta(seconds=seconds), self.cap)

    def bounds(self, attempt: int) -> tuple[timedelta, timedelta]:
        """The shortest and longest :meth:`delay` for ``attempt`` (no jitter, full
        jitter): what a log line can promise before the engine draws the jitter."""
        low = Backoff(jitter=lambda: 0.0, cap=self.cap).delay(attempt)
        high = Backoff(jitter=lambda: 1.0, cap=self.cap).delay(attempt)
        return low, high


NO_JITTER = Backoff(jitter=lambda: 0.0)


@attrs.frozen
class PriorityAging:
    """Effective priority at claim time: one level better per ``interval`` waited, never below 1.

    An interval of zero (or ``None``) disables aging.
    """

    interval: timedelta | None = timedelta(seconds=60)

    def effective_priority(self, priority: int, waiting_since: datetime, now: datetime) -> int:
        if self.interval is None or self.interval <= timedelta(0):
            return priority
        waited = now - waiting_since
        if waited <= timedelta(0):
            return priority
        levels = math.floor(waited / self.interval)
        return max(1, priority - levels)


@attrs.frozen
class RetentionFloor:
    """How long terminal history is kept before cleanup may remove it.

    Failed jobs stay retryable for at least ``failed``; completed and cancelled history
    is kept for ``completed``.
    """

    completed: timedelta = timedelta(hours=24)
    failed: timedelta = timedelta(hours=72)

    def keep_for(self, state: JobState) -> timedelta:
        if state == JobState.Failed:
            return self.failed
        return self.completed

    def is_expired(self, state: JobState, finalized_at: datetime, now: datetime) -> bool:
        if not state.is_terminal:
            return False
        return finalized_at + self.keep_for(state) <= now

    def cutoff(self, state: JobState, now: datetime) -> datetime:
        """Terminal rows of ``state`` finalized at or before this instant may be removed."""
        return now - self.keep_for(state)


#: A ring slot holding this many bytes (the main forks of its partitions) is full.
RING_SEAL_FILL_BYTES = 512 * 1024
#: A slot that never fills is sealed after this many rotate intervals.
RING_SEAL_MAX_INTERVALS = 8


@attrs.frozen
class RingSeal:
    """When the maintenance leader seals a ring's current slot: once it is full (its
    partitions hold ``fill_bytes``) or old (current for ``max_intervals`` intervals).

    A turn of the ring costs about the same whatever the slot holds (the prune it leads
    to, and a re-plan of the slot's statements in every backend), so a slot is not
    sealed after one interval unless it is worth it: under load a slot fills within the
    interval and the ring turns as often as before; with few jobs it turns less often
    and keeps completed history longer."""

    interval: timedelta
    fill_bytes: int = RING_SEAL_FILL_BYTES
    max_intervals: int = RING_SEAL_MAX_INTERVALS

    def due(self, *, age: timedelta | None, size_bytes: int) -> bool:
        """Whether a slot current for ``age`` (``None``: never turned since the install,
        so as old as it gets) and holding ``size_bytes`` is sealed now."""
        if age is None or size_bytes >= self.fill_bytes:
            return True
        return age >= self.interval * self.max_intervals


class RotateOutcome(enum.StrEnum):
    """What one rotate step of a ring did (the leader backs off on ``SKIPPED_BUSY``)."""

    #: The current slot was sealed and the next one opened.
    ROTATED = "rotated"
    #: The current slot holds nothing to seal (every lease slot is empty, for leases).
    SKIPPED_IDLE = "skipped_idle"
    #: The seal rule says the slot is neither full nor old yet (queue ring only).
    SKIPPED_FILLING = "skipped_filling"
    #: The next slot still holds rows.
    SKIPPED_BUSY = "skipped_busy"
    #: Another rotate or prune holds the ring.
    SKIPPED_LOCKED = "skipped_locked"


class PruneOutcome(enum.StrEnum):
    """What one prune step of a ring did (the leader backs off on ``BLOCKED``)."""

    #: The oldest sealed slot was truncated.
    PRUNED = "pruned"
    #: No sealed slot holds rows.
    IDLE = "idle"
    #: Live work, or a lock held by a running transaction, keeps the slot.
    BLOCKED = "blocked"
    #: Another rotate or prune holds the ring.
    SKIPPED_LOCKED = "skipped_locked"
