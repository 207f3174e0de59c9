"""Fleet-wide rate limits: the limiter's arithmetic, bad input refused by field name, the
queue config keys, live overrides and ``Snooze(until=...)``."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa.domain.errors import ValidationError
from awa.domain.handler_results import Snooze
from awa.domain.outcomes import RetryWithBackoff, SnoozeOutcome
from awa.domain.overrides import (
    DispatchSettings,
    QueueOverrides,
    apply_overrides,
    validate_overrides,
)
from awa.domain.rate_limits import (
    GlobalRateLimit,
    advance,
    allowance,
    held_back_by_rate,
    next_admission,
    validate_global_rate_limit,
)
from awa.runtime.config import parse_queues
from awa.runtime.outcome_mapping import outcome_for_result

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def test_a_fresh_limiter_admits_its_burst_then_one_per_interval() -> None:
    limit = GlobalRateLimit(rate=50.0, burst=5)
    assert limit.interval_us == 20_000
    assert allowance(limit, None, NOW) == 5
    tat = advance(limit, None, NOW, 5)
    assert tat == NOW + timedelta(milliseconds=100)
    assert allowance(limit, tat, NOW) == 0
    assert next_admission(limit, tat, NOW) == NOW + timedelta(milliseconds=20)
    assert allowance(limit, tat, NOW + timedelta(microseconds=19_999)) == 0
    assert allowance(limit, tat, NOW + timedelta(milliseconds=20)) == 1
    assert allowance(limit, tat, NOW + timedelta(seconds=10)) == 5


def test_the_interval_rounds_up_so_the_rate_is_never_exceeded() -> None:
    assert GlobalRateLimit(rate=3.0, burst=1).interval_us == 333_334
    assert GlobalRateLimit(rate=1_000_000.0, burst=1).interval_us == 1


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ((math.nan, 1), "global_rate_limit.max_rate"),
        ((math.inf, 1), "global_rate_limit.max_rate"),
        ((-1.0, 1), "global_rate_limit.max_rate"),
        ((0, 1), "global_rate_limit.max_rate"),
        ((2e6, 1), "global_rate_limit.max_rate"),
        ((True, 1), "global_rate_limit.max_rate"),
        (("5", 1), "global_rate_limit.max_rate"),
        ((5.0, 0), "global_rate_limit.burst"),
        ((5.0, -3), "global_rate_limit.burst"),
        ((5.0, 1.5), "global_rate_limit.burst"),
        ((5.0, math.nan), "global_rate_limit.burst"),
        ((5.0, 2_000_000), "global_rate_limit.burst"),
        ((5.0,), "global_rate_limit"),
        (5.0, "global_rate_limit"),
        ({"max_rate": 5.0, "burst": 1, "brust": 2}, "global_rate_limit"),
    ],
)
def test_bad_limits_are_refused_by_field(value: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_global_rate_limit(value)
    assert caught.value.field == field


def test_good_limits_in_every_spelling() -> None:
    expected = GlobalRateLimit(rate=50.0, burst=10)
    assert validate_global_rate_limit((50, 10)) == expected
    assert validate_global_rate_limit([50.0, 10.0]) == expected
    assert validate_global_rate_limit({"max_rate": 50, "burst": 10}) == expected
    assert validate_global_rate_limit({"rate": 50, "burst": 10}) == expected
    assert validate_global_rate_limit(None) is None


def test_queue_config_keys_are_parsed_and_refused_by_field() -> None:
    (queue,) = parse_queues(
        [
            {
                "name": "api",
                "global_rate_limit": (50, 10),
                "global_rate_limit_per_key": {"max_rate": 2, "burst": 1},
            }
        ],
        handler_queues={"api"},
        global_max_workers=None,
    )
    assert queue.global_rate_limit == GlobalRateLimit(rate=50.0, burst=10)
    assert queue.global_rate_limit_per_key == GlobalRateLimit(rate=2.0, burst=1)
    assert queue.rate_limit is None
    with pytest.raises(ValidationError) as caught:
        parse_queues(
            [{"name": "api", "global_rate_limit_per_key": (float("nan"), 1)}],
            handler_queues={"api"},
            global_max_workers=None,
        )
    assert caught.value.field == "queue 'api': global_rate_limit_per_key.max_rate"


STARTED = DispatchSettings(0.2, 10, None, None, None, GlobalRateLimit(rate=50.0, burst=10), None)
UNLIMITED = DispatchSettings(0.2, 10, None, None)


def test_an_override_sets_retunes_and_clears_the_fleet_limits() -> None:
    settings, ignored = apply_overrides(STARTED, QueueOverrides(global_rate_per_second=20.0))
    assert settings.global_rate_limit == GlobalRateLimit(rate=20.0, burst=10)
    assert ignored == []
    settings, _ = apply_overrides(STARTED, QueueOverrides(global_rate_burst=3))
    assert settings.global_rate_limit == GlobalRateLimit(rate=50.0, burst=3)
    # A queue started without a limit gets one (burst 1 when none is given)...
    settings, _ = apply_overrides(
        UNLIMITED, QueueOverrides(global_rate_per_second=5.0, global_rate_per_key_per_second=1.0)
    )
    assert settings.global_rate_limit == GlobalRateLimit(rate=5.0, burst=1)
    assert settings.global_rate_limit_per_key == GlobalRateLimit(rate=1.0, burst=1)
    # ...but a burst alone has nothing to retune, and says so.
    settings, ignored = apply_overrides(UNLIMITED, QueueOverrides(global_rate_burst=3))
    assert settings.global_rate_limit is None
    assert ignored and "global_rate_limit burst override ignored" in ignored[0]
    # Cleared overrides go back to the started value.
    assert apply_overrides(STARTED, QueueOverrides())[0] == STARTED


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (QueueOverrides(global_rate_per_second=math.nan), "global_rate_per_second"),
        (QueueOverrides(global_rate_per_second=-2.0), "global_rate_per_second"),
        (QueueOverrides(global_rate_per_key_per_second=0.0), "global_rate_per_key_per_second"),
        (QueueOverrides(global_rate_burst=0), "global_rate_burst"),
        (QueueOverrides(global_rate_per_key_burst=-1), "global_rate_per_key_burst"),
    ],
)
def test_bad_overrides_are_refused_by_field(overrides: QueueOverrides, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_overrides(overrides)
    assert caught.value.field == field


def test_snooze_until_an_api_reset_time() -> None:
    reset_at = NOW + timedelta(seconds=42)
    assert outcome_for_result(Snooze(until=reset_at), NOW) == SnoozeOutcome(
        delay=timedelta(seconds=42)
    )
    # A reset time already past runs the job again at once.
    assert outcome_for_result(Snooze(until=NOW - timedelta(seconds=5)), NOW) == SnoozeOutcome(
        delay=timedelta(0)
    )
    # Beyond what a delay may be: the attempt records why.
    far = outcome_for_result(Snooze(until=NOW + timedelta(days=365 * 200)), NOW)
    assert isinstance(far, RetryWithBackoff) and "until" in far.error
    with pytest.raises(ValidationError, match="timezone-aware"):
        Snooze(until=datetime(2026, 1, 1))
    with pytest.raises(ValidationError, match="either seconds or until"):
        Snooze(5, until=reset_at)


def test_held_back_counts_what_the_queue_limiter_cannot_admit_now() -> None:
    limit = GlobalRateLimit(rate=1.0, burst=3)
    tat = NOW + timedelta(seconds=3)
    assert held_back_by_rate(10, tat, limit, NOW) == 10
    assert held_back_by_rate(10, tat, limit, NOW + timedelta(seconds=1)) == 9
    # A limiter not ahead of now (idle), none at all, or no limit in force: nothing.
    assert held_back_by_rate(10, tat, limit, NOW + timedelta(seconds=3)) == 0
    assert held_back_by_rate(10, None, limit, NOW) == 0
    assert held_back_by_rate(10, tat, None, NOW) == 0
    # The limit in force decides, whatever the row was last claimed under: a larger
    # burst admits 7 of the 10 at once from the same tat.
    assert held_back_by_rate(10, tat, GlobalRateLimit(rate=1.0, burst=10), NOW) == 3
