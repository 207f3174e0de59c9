"""Backoff, priority aging and retention floors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from awa.domain import Backoff, JobState, PriorityAging, RetentionFloor
from awa.domain.policies import (
    MAX_BACKOFF,
    NO_JITTER,
    RING_SEAL_FILL_BYTES,
    RING_SEAL_MAX_INTERVALS,
    RingSeal,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------- backoff


@pytest.mark.parametrize(("attempt", "seconds"), [(0, 1), (1, 2), (2, 4), (5, 32), (10, 1024)])
def test_backoff_without_jitter_is_two_to_the_attempt(attempt: int, seconds: int) -> None:
    assert NO_JITTER.delay(attempt) == timedelta(seconds=seconds)


def test_backoff_jitter_adds_at_most_a_quarter() -> None:
    assert Backoff(jitter=lambda: 0.5).delay(4) == timedelta(seconds=16 + 2)
    assert Backoff(jitter=lambda: 0.999999).delay(4) < timedelta(seconds=20)
    assert Backoff(jitter=lambda: 1.0).delay(4) == timedelta(seconds=20)


def test_backoff_clamps_a_misbehaving_jitter_source() -> None:
    assert Backoff(jitter=lambda: -3.0).delay(3) == timedelta(seconds=8)
    assert Backoff(jitter=lambda: 7.0).delay(3) == timedelta(seconds=10)


def test_backoff_is_capped_at_24_hours() -> None:
    assert timedelta(hours=24) == MAX_BACKOFF
    assert NO_JITTER.delay(16) == timedelta(seconds=65536)
    assert NO_JITTER.delay(17) == timedelta(hours=24)
    assert NO_JITTER.delay(1000) == timedelta(hours=24)
    assert Backoff(jitter=lambda: 0.9).delay(10**9) == timedelta(hours=24)


def test_backoff_cap_is_configurable() -> None:
    assert Backoff(jitter=lambda: 0.0, cap=timedelta(seconds=5)).delay(10) == timedelta(seconds=5)


def test_backoff_bounds_are_the_delays_without_and_with_full_jitter() -> None:
    assert Backoff().bounds(3) == (timedelta(seconds=8), timedelta(seconds=10))
    capped = Backoff(cap=timedelta(seconds=9))
    assert capped.bounds(3) == (timedelta(seconds=8), timedelta(seconds=9))
    drawn = Backoff().delay(3)
    low, high = Backoff().bounds(3)
    assert low <= drawn <= high


def test_backoff_treats_negative_attempts_as_zero() -> None:
    assert NO_JITTER.delay(-4) == timedelta(seconds=1)


def test_backoff_default_jitter_stays_in_bounds() -> None:
    backoff = Backoff()
    for _ in range(200):
        assert timedelta(seconds=8) <= backoff.delay(3) <= timedelta(seconds=10)


# ---------------------------------------------------------------- aging


@pytest.mark.parametrize(
    ("priority", "waited", "expected"),
    [
        (4, timedelta(0), 4),
        (4, timedelta(seconds=59), 4),
        (4, timedelta(seconds=60), 3),
        (4, timedelta(seconds=150), 2),
        (4, timedelta(minutes=3), 1),
        (4, timedelta(hours=5), 1),
        (1, timedelta(hours=5), 1),
        (2, timedelta(seconds=-30), 2),
    ],
)
def test_aging_examples(priority: int, waited: timedelta, expected: int) -> None:
    aging = PriorityAging(interval=timedelta(seconds=60))
    assert aging.effective_priority(priority, T0, T0 + waited) == expected


@pytest.mark.parametrize("interval", [None, timedelta(0), timedelta(seconds=-1)])
def test_aging_disabled(interval: timedelta | None) -> None:
    aging = PriorityAging(interval=interval)
    assert aging.effective_priority(4, T0, T0 + timedelta(days=3)) == 4


def test_aging_default_interval_is_one_minute() -> None:
    assert PriorityAging().interval == timedelta(seconds=60)


# ---------------------------------------------------------------- retention


def test_retention_defaults_and_per_state_floor() -> None:
    floor = RetentionFloor()
    assert floor.keep_for(JobState.Completed) == timedelta(hours=24)
    assert floor.keep_for(JobState.Cancelled) == timedelta(hours=24)
    assert floor.keep_for(JobState.Failed) == timedelta(hours=72)


def test_retention_expiry_is_inclusive_at_the_floor() -> None:
    floor = RetentionFloor(completed=timedelta(hours=1), failed=timedelta(hours=2))
    assert not floor.is_expired(JobState.Completed, T0, T0 + timedelta(minutes=59))
    assert floor.is_expired(JobState.Completed, T0, T0 + timedelta(hours=1))
    assert not floor.is_expired(JobState.Failed, T0, T0 + timedelta(hours=1))
    assert floor.is_expired(JobState.Failed, T0, T0 + timedelta(hours=2))


@pytest.mark.parametrize(
    "state",
    [
        JobState.Scheduled,
        JobState.Available,
        JobState.Running,
        JobState.Retryable,
        JobState.WaitingExternal,
    ],
)
def test_live_jobs_never_expire(state: JobState) -> None:
    assert not RetentionFloor().is_expired(state, T0, T0 + timedelta(days=365))


def test_retention_cutoff() -> None:
    floor = RetentionFloor(completed=timedelta(hours=1), failed=timedelta(hours=3))
    assert floor.cutoff(JobState.Completed, T0) == T0 - timedelta(hours=1)
    assert floor.cutoff(JobState.Failed, T0) == T0 - timedelta(hours=3)


# ---------------------------------------------------------------- ring seal


def test_ring_seal_waits_for_a_full_or_old_slot() -> None:
    seal = RingSeal(interval=timedelta(seconds=1))
    assert (seal.fill_bytes, seal.max_intervals) == (RING_SEAL_FILL_BYTES, RING_SEAL_MAX_INTERVALS)
    young = timedelta(seconds=1)
    # one interval old and nearly empty: not yet
    assert not seal.due(age=young, size_bytes=8192)
    assert not seal.due(age=young, size_bytes=RING_SEAL_FILL_BYTES - 1)
    # full: at once, however young
    assert seal.due(age=timedelta(0), size_bytes=RING_SEAL_FILL_BYTES)
    # old: after max_intervals intervals, however empty
    old = timedelta(seconds=RING_SEAL_MAX_INTERVALS)
    assert not seal.due(age=old - timedelta(milliseconds=1), size_bytes=0)
    assert seal.due(age=old, size_bytes=0)
    # never turned since the install: as old as it gets
    assert seal.due(age=None, size_bytes=0)
    # the rule scales with the interval
    slow = RingSeal(interval=timedelta(seconds=5), fill_bytes=100, max_intervals=2)
    assert not slow.due(age=timedelta(seconds=9), size_bytes=99)
    assert slow.due(age=timedelta(seconds=10), size_bytes=99)
    assert slow.due(age=timedelta(seconds=1), size_bytes=100)
