"""Fleet-wide rate limits: the limiter a claim consults and advances in its own transaction.

A queue's config ``"global_rate_limit": (max_rate, burst)`` admits at most ``burst`` jobs
at once and ``max_rate`` per second after that, for the whole fleet (every process and
host claiming the queue); ``"global_rate_limit_per_key": (max_rate, burst)`` does the same
for each concurrency key of the queue. Contrast ``rate_limit``, a token bucket in each
process (four processes run four times its rate).

The limiter is GCRA (ADR 0029, "Rate limits"): its whole state is one instant, the
*theoretical arrival time* ``tat``, kept in a row per limiter that the claim locks,
reads, and moves forward by the jobs it took. Time is integer microseconds, so every
engine computes exactly the same allowance and no rounding can admit one job too many:

- the emission interval is ``ceil(1_000_000 / max_rate)`` microseconds (never faster than
  ``max_rate``);
- at ``now`` the limiter admits ``(burst * interval - max(0, tat - now)) // interval``
  jobs (at most ``burst``, never below zero);
- after taking ``n``, ``tat = max(tat, now) + n * interval``.

In any window of ``t`` seconds it admits at most ``burst + max_rate * t`` jobs: it is a
token bucket of ``burst`` tokens refilled at ``max_rate``, written as one timestamp.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.flow_control import keyed_shard

#: The fastest fleet-wide rate, per second: one job per microsecond of the interval.
MAX_GLOBAL_RATE = 1_000_000.0
#: The slowest: one job a day.
MIN_GLOBAL_RATE = 1 / 86_400
#: The largest burst.
MAX_GLOBAL_BURST = 1_000_000

#: The limiter row of a queue's own limit (a concurrency key's limiter is named by its
#: key's lane shard, so it is never empty).
QUEUE_LIMITER = ""

_MICROSECOND = timedelta(microseconds=1)


@attrs.frozen
class GlobalRateLimit:
    """``rate`` jobs per second across the fleet, at most ``burst`` at once."""

    rate: float
    burst: int

    @property
    def interval_us(self) -> int:
        """The emission interval in whole microseconds, rounded up."""
        return max(1, math.ceil(1_000_000 / self.rate))

    def as_tuple(self) -> tuple[float, int]:
        return (self.rate, self.burst)


def validate_rate(value: Any, field: str) -> float:
    """A fleet-wide rate: a finite number of jobs per second in
    [:data:`MIN_GLOBAL_RATE`, :data:`MAX_GLOBAL_RATE`]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationTypeError(
            field, f"must be a number of jobs per second, got {type(value).__name__}", value=value
        )
    rate = float(value)
    if math.isnan(rate) or math.isinf(rate):
        raise ValidationError(field, f"must be a finite number, got {value}", value=value)
    if rate <= 0:
        raise ValidationError(field, f"must be > 0, got {value}", value=value)
    if not MIN_GLOBAL_RATE <= rate <= MAX_GLOBAL_RATE:
        raise ValidationError(
            field,
            f"must be between {MIN_GLOBAL_RATE:.3g} (one a day) and {MAX_GLOBAL_RATE:.0f} "
            f"per second, got {value}",
            value=value,
        )
    return rate


def validate_burst(value: Any, field: str) -> int:
    """A burst: an integer from 1 to :data:`MAX_GLOBAL_BURST` (an integral float is
    accepted)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(
            field, f"must be an integer, got {type(value).__name__}", value=value
        )
    if not 1 <= value <= MAX_GLOBAL_BURST:
        raise ValidationError(
            field, f"must be between 1 and {MAX_GLOBAL_BURST}, got {value}", value=value
        )
    return value


def validate_global_rate_limit(
    value: Any, field: str = "global_rate_limit"
) -> GlobalRateLimit | None:
    """``None``, a :class:`GlobalRateLimit`, a ``(max_rate, burst)`` pair or a dict with
    ``max_rate`` (or ``rate``) and ``burst``; raises ``ValidationError`` naming ``field``."""
    if value is None:
        return None
    if isinstance(value, GlobalRateLimit):
        value = value.as_tuple()
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"max_rate", "rate", "burst"})
        if unknown:
            raise ValidationError(field, f"unknown key(s): {', '.join(map(str, unknown))}")
        value = (value.get("max_rate", value.get("rate")), value.get("burst"))
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValidationTypeError(
            field, f"must be a (max_rate, burst) pair, got {value!r}", value=value
        )
    rate = validate_rate(value[0], f"{field}.max_rate")
    burst = validate_burst(value[1], f"{field}.burst")
    return GlobalRateLimit(rate=rate, burst=burst)


def _us(delta: timedelta) -> int:
    return delta // _MICROSECOND


def allowance(limit: GlobalRateLimit, tat: datetime | None, now: datetime) -> int:
    """How many jobs the limiter admits at ``now`` (0..``burst``); ``tat=None`` is a
    limiter never used (full burst)."""
    interval = limit.interval_us
    backlog = 0 if tat is None else max(0, _us(tat - now))
    return max(0, min(limit.burst, (limit.burst * interval - backlog) // interval))


def advance(limit: GlobalRateLimit, tat: datetime | None, now: datetime, taken: int) -> datetime:
    """The limiter's ``tat`` after ``taken`` jobs were admitted at ``now``."""
    start = now if tat is None or tat < now else tat
    return start + timedelta(microseconds=taken * limit.interval_us)


def next_admission(limit: GlobalRateLimit, tat: datetime | None, now: datetime) -> datetime:
    """The first instant at or after ``now`` at which the limiter admits a job."""
    if allowance(limit, tat, now) > 0 or tat is None:
        return now
    interval = limit.interval_us
    # admits one once tat - t <= (burst - 1) * interval
    return tat - timedelta(microseconds=(limit.burst - 1) * interval)


def resume_at(limit: GlobalRateLimit, tat: datetime | None, now: datetime) -> datetime:
    """When a claimer the limiter cut short should look again: once the limiter admits
    half its burst (at least one job), so the fleet's claimers take tokens in batches
    instead of each waking for every token and queueing on the limiter's row."""
    if tat is None or tat <= now:
        return now
    batch = max(1, limit.burst // 2)
    at = tat - timedelta(microseconds=(limit.burst - batch) * limit.interval_us)
    return max(at, now)


def idle(tat: datetime, now: datetime) -> bool:
    """Whether a limiter whose theoretical arrival time is ``tat`` has refilled its whole
    burst by ``now``: it then admits exactly what a limiter never used admits
    (:func:`allowance` and :func:`advance` treat it as ``tat=None``), so its row may be
    deleted without changing any claim. The leader prunes such rows (ADR 0029)."""
    return tat <= now


#: How many idle limiter rows the leader deletes in one statement.
PRUNE_BATCH = 1000


def key_limiter(concurrency_key: str) -> str:
    """The limiter name of a concurrency key: its lane shard on queue storage, used by
    every engine so all of them share one limiter per key (two keys whose hashes meet
    share one, as they share a lane; ADR 0029)."""
    return str(keyed_shard(concurrency_key))


def shard_limiter(shard: int) -> str:
    """The limiter name of a keyed lane's shard (queue storage)."""
    return str(shard)


@attrs.frozen
class Admission:
    """What the fleet-wide rate limits let one claim take: at most ``limit`` jobs in all,
    and per concurrency key (its limiter name) at most ``per_key[name]``."""

    limit: int
    per_key: dict[str, int] | None = None


def admission(
    *,
    queue_limit: GlobalRateLimit | None,
    queue_tat: datetime | None,
    per_key_limit: GlobalRateLimit | None,
    key_tats: dict[str, datetime | None],
    wanted: int,
    now: datetime,
) -> Admission:
    """The allowance of a claim that wants ``wanted`` jobs, from the limiters' state read
    under their row locks (``key_tats``: each candidate key's limiter, by name)."""
    limit = wanted
    if queue_limit is not None:
        limit = min(limit, allowance(queue_limit, queue_tat, now))
    per_key = None
    if per_key_limit is not None:
        per_key = {name: allowance(per_key_limit, tat, now) for name, tat in key_tats.items()}
    return Admission(limit=limit, per_key=per_key)


def advanced(
    *,
    queue_limit: GlobalRateLimit | None,
    queue_tat: datetime | None,
    per_key_limit: GlobalRateLimit | None,
    key_tats: dict[str, datetime | None],
    taken_per_key: dict[str, int],
    taken: int,
    now: datetime,
) -> dict[str, datetime]:
    """The limiters' new ``tat`` after a claim took ``taken`` jobs (``taken_per_key`` of
    them by limiter name), by limiter name (:data:`QUEUE_LIMITER` for the queue's own).
    Limiters that took nothing are left as they are."""
    out: dict[str, datetime] = {}
    if queue_limit is not None and taken:
        out[QUEUE_LIMITER] = advance(queue_limit, queue_tat, now, taken)
    if per_key_limit is not None:
        for name, n in taken_per_key.items():
            if n:
                out[name] = advance(per_key_limit, key_tats.get(name), now, n)
    return out


@attrs.frozen
class LimiterState:
    """One limiter as the claims left it: ``limiter`` is :data:`QUEUE_LIMITER` for the
    queue's own, else a key's; ``limit`` is what it was last claimed under."""

    queue: str
    limiter: str
    tat: datetime
    limit: GlobalRateLimit


def held_back_by_rate(
    available: int, tat: datetime | None, limit: GlobalRateLimit | None, now: datetime
) -> int:
    """How many of a queue's ``available`` jobs its fleet-wide limiter (at ``tat``)
    cannot admit at ``now`` under ``limit``, the limit in force (an operator's override,
    else the live workers'; ``None``: no limit, nothing held back), as the next claim
    would admit them: what ``queue_stats`` reports as ``rate_limited``. The limit the
    row was last claimed under does not count: an override changes it at once. A
    limiter whose ``tat`` is not ahead of ``now`` has its whole burst and holds nothing
    back."""
    if limit is None or tat is None or tat <= now:
        return 0
    return max(0, available - allowance(limit, tat, now))
