"""Live queue overrides: operator settings in ``awa.queue_meta`` that running dispatchers
apply without a restart.

The value a runtime was started with is the default; a set override wins; clearing it
reverts to the default. Two guard rails keep an override from changing how a queue is
claimed, only how fast:

* a rate-limit override retunes a queue's existing limiter; it neither adds a limiter to
  a queue started without one nor removes one;
* a deadline override never crosses zero: it retunes a queue started with a deadline to
  another non-zero deadline, and is ignored on a queue started without one (0 = none).

The per-key limit (``max_running_per_key``, ADR 0029) is not how fast but how many at
once per key, a rule every claimer of the fleet must share: its override sets it on every
runtime serving the queue, with or without a started value. So do the fleet-wide rate
limits (``global_rate_limit`` and ``global_rate_limit_per_key``, ADR 0029).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import attrs

from awa.domain.errors import ValidationError
from awa.domain.flow_control import validate_max_running_per_key
from awa.domain.rate_limits import GlobalRateLimit, validate_burst, validate_rate


def _positive_int(field: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}")
    if value <= 0:
        raise ValidationError(field, f"must be > 0, got {value}", value=value)


@attrs.frozen
class QueueOverrides:
    """The override columns of one queue; ``None`` means "use the started value"."""

    poll_interval_ms: int | None = None
    claim_batch_size: int | None = None
    rate_limit_per_second: float | None = None
    rate_limit_burst: int | None = None
    deadline_ms: int | None = None
    max_running_per_key: int | None = None
    global_rate_per_second: float | None = None
    global_rate_burst: int | None = None
    global_rate_per_key_per_second: float | None = None
    global_rate_per_key_burst: int | None = None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in attrs.fields(QueueOverrides))

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def validate_overrides(overrides: QueueOverrides) -> QueueOverrides:
    """Refuse values the columns' checks would refuse, naming the field."""
    _positive_int("poll_interval_ms", overrides.poll_interval_ms)
    _positive_int("claim_batch_size", overrides.claim_batch_size)
    _positive_int("rate_limit_burst", overrides.rate_limit_burst)
    rate = overrides.rate_limit_per_second
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ValidationError(
                "rate_limit_per_second", f"must be a number, got {type(rate).__name__}"
            )
        if not math.isfinite(rate) or rate <= 0:
            raise ValidationError("rate_limit_per_second", f"must be > 0, got {rate}", value=rate)
    deadline = overrides.deadline_ms
    if deadline is not None:
        if isinstance(deadline, bool) or not isinstance(deadline, int):
            raise ValidationError(
                "deadline_ms", f"must be an integer, got {type(deadline).__name__}"
            )
        if deadline < 0:
            raise ValidationError("deadline_ms", f"must be >= 0, got {deadline}", value=deadline)
    validate_max_running_per_key(overrides.max_running_per_key)
    for rate_field in ("global_rate_per_second", "global_rate_per_key_per_second"):
        if getattr(overrides, rate_field) is not None:
            validate_rate(getattr(overrides, rate_field), rate_field)
    for burst_field in ("global_rate_burst", "global_rate_per_key_burst"):
        value = getattr(overrides, burst_field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValidationError(burst_field, f"must be an integer, got {type(value).__name__}")
        if value is not None:
            validate_burst(value, burst_field)
    return overrides


@attrs.frozen
class DispatchSettings:
    """What a dispatcher claims with: poll interval (seconds), batch size, rate limit
    ``(rate, burst)`` or ``None``, attempt deadline or ``None``, and the per-key limit
    (``max_running_per_key``) or ``None``."""

    poll_interval: float
    claim_batch_size: int
    rate_limit: tuple[float, int] | None
    deadline: timedelta | None
    max_running_per_key: int | None = None
    global_rate_limit: GlobalRateLimit | None = None
    global_rate_limit_per_key: GlobalRateLimit | None = None


def _fleet_rate(
    name: str,
    started: GlobalRateLimit | None,
    rate: float | None,
    burst: int | None,
    ignored: list[str],
) -> GlobalRateLimit | None:
    """A fleet-wide rate limit under its override: like the per-key limit, a rule every
    claimer shares, so an override sets it with or without a started value. A rate
    without a burst keeps the started burst (1 when there is none: strict pacing); a
    burst alone retunes a started limit only."""
    if rate is None and burst is None:
        return started
    if rate is None:
        if started is None:
            ignored.append(
                f"{name} burst override ignored: the queue was started without {name} "
                "and the override sets no rate"
            )
            return None
        rate = started.rate
    if burst is None:
        burst = 1 if started is None else started.burst
    return GlobalRateLimit(rate=rate, burst=burst)


def apply_overrides(
    started: DispatchSettings, overrides: QueueOverrides | None
) -> tuple[DispatchSettings, list[str]]:
    """The settings in force under ``overrides``, and why any override was not applied."""
    if overrides is None or overrides.is_empty:
        return started, []
    ignored: list[str] = []
    poll = started.poll_interval
    if overrides.poll_interval_ms is not None:
        poll = overrides.poll_interval_ms / 1000.0
    batch = overrides.claim_batch_size or started.claim_batch_size
    rate_limit = started.rate_limit
    wants_rate = (
        overrides.rate_limit_per_second is not None or overrides.rate_limit_burst is not None
    )
    if wants_rate and rate_limit is None:
        ignored.append(
            "rate limit override ignored: the queue was started without a rate limit "
            "(an override only retunes an existing limiter)"
        )
    elif wants_rate and rate_limit is not None:
        rate_limit = (
            overrides.rate_limit_per_second or rate_limit[0],
            overrides.rate_limit_burst or rate_limit[1],
        )
    deadline = started.deadline
    if overrides.deadline_ms is not None:
        if started.deadline is None:
            ignored.append(
                "deadline override ignored: the queue was started without a deadline "
                "(an override never enables or disables deadlines)"
            )
        elif overrides.deadline_ms == 0:
            ignored.append(
                "deadline override of 0 ignored: the queue was started with a deadline "
                "(an override never enables or disables deadlines)"
            )
        else:
            deadline = timedelta(milliseconds=overrides.deadline_ms)
    # The per-key limit is a fleet-wide rule: an override sets it (adding one to a queue
    # started without), clearing the override goes back to the started value.
    per_key = overrides.max_running_per_key or started.max_running_per_key
    fleet_rate = _fleet_rate(
        "global_rate_limit",
        started.global_rate_limit,
        overrides.global_rate_per_second,
        overrides.global_rate_burst,
        ignored,
    )
    fleet_rate_per_key = _fleet_rate(
        "global_rate_limit_per_key",
        started.global_rate_limit_per_key,
        overrides.global_rate_per_key_per_second,
        overrides.global_rate_per_key_burst,
        ignored,
    )
    return (
        DispatchSettings(
            poll, batch, rate_limit, deadline, per_key, fleet_rate, fleet_rate_per_key
        ),
        ignored,
    )
