"""The per-job held-back rule (``awa.domain.held_back``): which limit holds an available
job back, in order (its key's slots, the queue's limiter, its key's limiter)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from awa.domain.held_back import (
    GLOBAL_RATE_LIMIT,
    GLOBAL_RATE_LIMIT_PER_KEY,
    MAX_RUNNING_PER_KEY,
    HeldBack,
    held_back_reason,
)
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.states import JobState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RATE = GlobalRateLimit(rate=2.0, burst=2)  # 500 ms apart, two at once


def reason(**changes: Any) -> HeldBack | None:
    fields: dict[str, Any] = {
        "state": JobState.Available,
        "key": "tenant-42",
        "running": 0,
        "max_running_per_key": None,
        "queue_rate": None,
        "queue_tat": None,
        "key_rate": None,
        "key_tat": None,
        "now": NOW,
    }
    return held_back_reason(**(fields | changes))


def test_nothing_holds_a_job_without_limits() -> None:
    assert reason() is None
    assert reason(key=None, running=5, max_running_per_key=1) is None


def test_a_key_with_every_slot_held() -> None:
    assert reason(running=1, max_running_per_key=2) is None
    held = reason(running=2, max_running_per_key=2)
    assert held == HeldBack(MAX_RUNNING_PER_KEY, key="tenant-42", running=2, max_running=2)
    assert held.describe() == "held back: key tenant-42 has 2 of 2 running (max_running_per_key)"


def test_only_available_jobs_are_held_back() -> None:
    for state in JobState:
        if state is not JobState.Available:
            assert reason(state=state, running=9, max_running_per_key=1) is None


def test_the_queue_limiter_with_no_token() -> None:
    assert reason(queue_rate=RATE) is None  # never used: the whole burst
    assert reason(queue_rate=RATE, queue_tat=NOW + timedelta(milliseconds=500)) is None
    held = reason(queue_rate=RATE, queue_tat=NOW + timedelta(seconds=1))
    assert held == HeldBack(GLOBAL_RATE_LIMIT, next_admission=NOW + timedelta(milliseconds=500))
    assert held.describe() == (
        "held back: queue rate limit (global_rate_limit), next admission at "
        "2026-01-01T00:00:00.500000+00:00"
    )
    assert reason(key=None, queue_rate=RATE, queue_tat=NOW + timedelta(seconds=1)) == held


def test_the_key_limiter_with_no_token() -> None:
    tat = NOW + timedelta(seconds=2)
    held = reason(key_rate=RATE, key_tat=tat)
    assert held == HeldBack(
        GLOBAL_RATE_LIMIT_PER_KEY, key="tenant-42", next_admission=NOW + timedelta(seconds=1.5)
    )
    assert held.describe().startswith("held back: key tenant-42 rate limit")
    assert reason(key=None, key_rate=RATE, key_tat=tat) is None


def test_a_full_key_comes_first_then_the_queue_limiter() -> None:
    full = reason(
        running=1,
        max_running_per_key=1,
        queue_rate=RATE,
        queue_tat=NOW + timedelta(seconds=9),
        key_rate=RATE,
        key_tat=NOW + timedelta(seconds=9),
    )
    assert full is not None and full.limit == MAX_RUNNING_PER_KEY
    rated = reason(
        queue_rate=RATE,
        queue_tat=NOW + timedelta(seconds=9),
        key_rate=RATE,
        key_tat=NOW + timedelta(seconds=9),
    )
    assert rated is not None and rated.limit == GLOBAL_RATE_LIMIT


def test_the_json_shape() -> None:
    held = HeldBack(GLOBAL_RATE_LIMIT_PER_KEY, key="k", next_admission=NOW)
    assert held.as_json() == {
        "limit": "global_rate_limit_per_key",
        "key": "k",
        "running": None,
        "max_running": None,
        "next_admission": "2026-01-01T00:00:00+00:00",
        "reason": held.describe(),
    }
