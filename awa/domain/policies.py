"""Pure scheduling policies: retry backoff, priority aging, retention floors and the
queue-storage rings' seal rule with the outcomes of their upkeep steps."""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.states import JobState
from awa.domain.validation import MAX_MAX_ATTEMPTS, MIN_MAX_ATTEMPTS

MAX_BACKOFF = timedelta(hours=24)
#: The awa-pg default: 25 % of the delay added at random.
DEFAULT_JITTER = 0.25
#: The exponent is capped here: ``2^60`` times any base is past every cap.
_MAX_EXPONENT = 60
#: The longest ``base`` or ``max_delay`` a retry policy takes (ten years).
MAX_POLICY_SECONDS = 10 * 365 * 24 * 3600


class BackoffShape(enum.StrEnum):
    """How a retry's delay grows with the attempt number ``n`` (``base`` is the unit)."""

    #: ``base * 2^n`` (awa-pg's backoff, with ``base`` 1 s).
    EXPONENTIAL = "exponential"
    #: ``base * n``.
    LINEAR = "linear"
    #: ``base``, whatever the attempt.
    CONSTANT = "constant"


#: A backoff of the caller's own: the delay (a ``timedelta`` or seconds) before retrying
#: after attempt ``n`` failed.
DelayFunction = Callable[[int], "timedelta | float"]


def _seconds(field: str, value: object, *, positive: bool) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValidationTypeError(
            field, f"must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    low = seconds > 0 if positive else seconds >= 0
    if not (math.isfinite(seconds) and low and seconds <= MAX_POLICY_SECONDS):
        bound = "greater than 0" if positive else "at least 0"
        raise ValidationError(
            field,
            f"must be {bound} and at most {MAX_POLICY_SECONDS} seconds, got {value}",
            value=value,
        )
    return seconds


def _shape(value: object) -> BackoffShape | DelayFunction:
    if isinstance(value, str):
        try:
            return BackoffShape(value)
        except ValueError:
            names = ", ".join(repr(s.value) for s in BackoffShape)
            raise ValidationError(
                "backoff", f"must be one of {names} or a callable, got {value!r}", value=value
            ) from None
    if callable(value):
        return cast(DelayFunction, value)
    raise ValidationTypeError(
        "backoff",
        f"must be one of 'exponential', 'linear', 'constant' or a callable, "
        f"got {type(value).__name__}",
    )


def _max_attempts(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(
            "max_attempts", f"must be an integer or None, got {type(value).__name__}"
        )
    if not MIN_MAX_ATTEMPTS <= value <= MAX_MAX_ATTEMPTS:
        raise ValidationError(
            "max_attempts",
            f"must be between {MIN_MAX_ATTEMPTS} and {MAX_MAX_ATTEMPTS}, got {value}",
            value=value,
        )
    return value


def _jitter(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationTypeError("jitter", f"must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValidationError("jitter", f"must be between 0 and 1, got {value}", value=value)
    return float(value)


@attrs.frozen(init=False)
class RetryPolicy:
    """How a job kind retries after a retryable failure (a handler's exception or
    ``RetryAfter``, and the maintenance leader's rescues).

    ``max_attempts``: the kind's attempt budget, used instead of each job's own
    ``max_attempts`` when set (``None``: the job's). ``backoff``: ``"exponential"``
    (``base * 2^n``), ``"linear"`` (``base * n``), ``"constant"`` (``base``) or a callable
    taking the attempt number ``n`` and returning the delay (a ``timedelta`` or seconds).
    ``jitter``: up to this fraction of the delay is added at random (0 to 1).
    ``max_delay``: no delay is longer. ``RetryPolicy()`` is awa-pg's retry: exponential
    from 1 s, 25 % jitter, at most 24 h, the job's own attempt budget.

    Every value is checked here: a bad one raises ``ValidationError`` naming it. A
    callable that raises, or returns something that is not a finite number of seconds
    of at least 0, falls back to the exponential delay for that attempt (the lifecycle
    cannot stop a transition half-way for it).
    """

    max_attempts: int | None
    backoff: BackoffShape | DelayFunction
    base: timedelta
    jitter: float
    max_delay: timedelta

    def __init__(
        self,
        max_attempts: int | None = None,
        backoff: str | BackoffShape | DelayFunction = BackoffShape.EXPONENTIAL,
        *,
        base: timedelta | float = timedelta(seconds=1),
        jitter: float = DEFAULT_JITTER,
        max_delay: timedelta | float = MAX_BACKOFF,
    ) -> None:
        self.__attrs_init__(
            _max_attempts(max_attempts),
            _shape(backoff),
            timedelta(seconds=_seconds("base", base, positive=True)),
            _jitter(jitter),
            timedelta(seconds=_seconds("max_delay", max_delay, positive=True)),
        )

    def _raw_seconds(self, attempt: int) -> float:
        """The delay before jitter and cap."""
        n = max(attempt, 0)
        base = self.base.total_seconds()
        shape = self.backoff
        if shape is BackoffShape.EXPONENTIAL:
            return base * float(2 ** min(n, _MAX_EXPONENT))
        if shape is BackoffShape.LINEAR:
            return base * n
        if shape is BackoffShape.CONSTANT:
            return base
        try:
            return _seconds("backoff", shape(n), positive=False)
        except Exception:  # a user's function: the documented fallback
            return base * float(2 ** min(n, _MAX_EXPONENT))

    def delay(self, attempt: int, draw: float) -> timedelta:
        """The delay before retrying after attempt ``attempt`` failed; ``draw`` is a
        random number in ``[0, 1)`` (the share of the jitter taken)."""
        raw = self._raw_seconds(attempt)
        fraction = min(max(draw, 0.0), 1.0)
        seconds = min(raw + raw * self.jitter * fraction, self.max_delay.total_seconds())
        return timedelta(seconds=seconds)

    def budget(self, job_max_attempts: int) -> int:
        """The attempts a job with ``job_max_attempts`` of its own has under this policy."""
        return job_max_attempts if self.max_attempts is None else self.max_attempts


@attrs.frozen
class Backoff:
    """The default retry delay (awa-pg's, :class:`RetryPolicy`'s defaults):
    ``min(2^attempt s + up to 25 % jitter, 24 h)``; and the random source every retry
    policy of an engine draws its jitter from.

    ``jitter`` returns a float in ``[0, 1)``; inject a constant for deterministic tests.
    """

    jitter: Callable[[], float] = random.random
    cap: timedelta = MAX_BACKOFF

    def delay(self, attempt: int) -> timedelta:
        return RetryPolicy(max_delay=self.cap).delay(attempt, self.jitter())

    def policy_delay(self, policy: RetryPolicy | None, attempt: int) -> timedelta:
        """The delay ``policy`` gives ``attempt`` with this backoff's jitter draw; the
        default (:meth:`delay`) when there is no policy."""
        if policy is None:
            return self.delay(attempt)
        return policy.delay(attempt, self.jitter())

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


#: The most unclaimed rows one step of a queue-ring prune moves out of the slot it
#: reclaims (ADR 0006, "Carry-forward of live rows", *A step at a time*): a slot holding
#: more is emptied of them over several steps, each its own short transaction, before the
#: swap, so no step grows with the backlog.
DEFAULT_CARRY_BATCH = 500


class PruneOutcome(enum.StrEnum):
    """What one prune step of a ring did (the leader backs off on ``BLOCKED`` and calls
    again at once on ``CARRIED``)."""

    #: The oldest sealed slot was truncated.
    PRUNED = "pruned"
    #: No sealed slot holds rows.
    IDLE = "idle"
    #: Live work, or a lock held by a running transaction, keeps the slot.
    BLOCKED = "blocked"
    #: Another rotate or prune holds the ring.
    SKIPPED_LOCKED = "skipped_locked"
    #: One bounded step of unclaimed rows was moved out of the slot into the current one;
    #: more are left, so the slot is not reclaimed yet (queue ring only).
    CARRIED = "carried"
