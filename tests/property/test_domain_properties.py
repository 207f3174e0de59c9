"""Hypothesis properties of the pure domain."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from awa.domain import (
    Backoff,
    JobSpec,
    JobState,
    PartitionedQueue,
    PriorityAging,
    ValidationError,
    ordering_hash,
    shard_for_key,
    validate_spec,
)
from awa.domain.partitioning import MAX_PARTITIONS, partition_for_key
from awa.domain.states import (
    bitstring_to_mask,
    mask_to_bitstring,
    mask_to_states,
    states_to_mask,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(hours=24)

priorities = st.integers(min_value=1, max_value=4)
intervals = st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(hours=2))
waits = st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=30))
keys = st.binary(max_size=64) | st.text(max_size=32)


# ---------------------------------------------------------------- aging


@given(priorities, intervals, waits)
def test_aging_never_raises_the_priority_number_nor_goes_below_one(
    priority: int, interval: timedelta, waited: timedelta
) -> None:
    effective = PriorityAging(interval).effective_priority(priority, T0, T0 + waited)
    assert 1 <= effective <= priority


@given(priorities, intervals, waits, waits)
def test_aging_is_monotone_in_waiting_time(
    priority: int, interval: timedelta, a: timedelta, b: timedelta
) -> None:
    shorter, longer = sorted((a, b))
    aging = PriorityAging(interval)
    assert aging.effective_priority(priority, T0, T0 + longer) <= aging.effective_priority(
        priority, T0, T0 + shorter
    )


@given(priorities, intervals)
def test_aging_reaches_one_after_enough_intervals(priority: int, interval: timedelta) -> None:
    aging = PriorityAging(interval)
    assert aging.effective_priority(priority, T0, T0 + interval * priority) == 1


# ---------------------------------------------------------------- backoff


@given(
    st.integers(min_value=0, max_value=2000),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_backoff_within_bounds_and_capped(attempt: int, jitter: float) -> None:
    delay = Backoff(jitter=lambda: jitter).delay(attempt)
    base = timedelta(seconds=2 ** min(attempt, 20))
    assert delay <= DAY
    assert min(base, DAY) <= delay <= min(base * 1.25, DAY)


@given(st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=100))
def test_backoff_without_jitter_never_shrinks(a: int, b: int) -> None:
    backoff = Backoff(jitter=lambda: 0.0)
    low, high = sorted((a, b))
    assert backoff.delay(low) <= backoff.delay(high)


# ---------------------------------------------------------------- routing


@given(keys, st.integers(min_value=1, max_value=64))
def test_shard_is_stable_and_in_range(key: bytes | str, shards: int) -> None:
    shard = shard_for_key(key, shards)
    assert 0 <= shard < shards
    assert shard == shard_for_key(key, shards)
    assert 0 <= ordering_hash(key) < 2**64


@given(st.text(max_size=32))
def test_str_and_utf8_bytes_route_identically(key: str) -> None:
    assert ordering_hash(key) == ordering_hash(key.encode("utf-8"))


@given(keys, st.integers(min_value=1, max_value=MAX_PARTITIONS))
def test_partition_is_stable_and_in_range(key: bytes | str, partitions: int) -> None:
    index = partition_for_key(key, partitions)
    assert 0 <= index < partitions
    assert index == partition_for_key(key, partitions)


@given(
    st.text(alphabet="abcxyz_", min_size=1, max_size=12),
    st.integers(min_value=1, max_value=200),
    keys,
)
def test_partitioned_queue_routes_to_one_of_its_queues(
    logical: str, partitions: int, key: bytes | str
) -> None:
    pq = PartitionedQueue(logical, partitions)
    assert pq.queue_for_key(key) in pq.physical_queues
    assert pq.queue_for_key(key) == pq.queue_for_key(key)
    assert PartitionedQueue.from_physical_queues(logical, pq.physical_queues) == pq


# ---------------------------------------------------------------- masks


@given(st.integers(min_value=0, max_value=255))
def test_mask_state_round_trip(mask: int) -> None:
    assert states_to_mask(mask_to_states(mask)) == mask


@given(st.frozensets(st.sampled_from(list(JobState))))
def test_state_mask_round_trip(states: frozenset[JobState]) -> None:
    assert mask_to_states(states_to_mask(states)) == states


@given(st.integers(min_value=0, max_value=255))
def test_mask_bitstring_round_trip(mask: int) -> None:
    bits = mask_to_bitstring(mask)
    assert len(bits) == 8
    assert bitstring_to_mask(bits) == mask


@given(st.text(alphabet="01", min_size=8, max_size=8))
def test_bitstring_mask_round_trip(bits: str) -> None:
    assert mask_to_bitstring(bitstring_to_mask(bits)) == bits


# ---------------------------------------------------------------- validation totality

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_like: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)
anything: st.SearchStrategy[Any] = (
    json_like | st.binary(max_size=8) | st.tuples(st.integers()) | st.just(object())
)
names = st.text(max_size=210) | st.integers() | st.none()
specs = st.builds(
    JobSpec,
    kind=names,
    args=anything,
    queue=names,
    priority=st.integers(min_value=-5, max_value=10) | st.booleans() | st.floats(),
    max_attempts=st.integers(min_value=-5, max_value=1100) | st.text(max_size=3),
    run_at=st.none() | st.datetimes() | st.datetimes(timezones=st.just(UTC)),
    metadata=st.dictionaries(st.text(max_size=6), json_like, max_size=3),
    tags=st.lists(st.text(max_size=210) | st.integers(), max_size=25),
    unique_key=st.none() | st.binary(max_size=16) | st.text(max_size=4),
    unique_states=st.none() | st.integers(min_value=-10, max_value=300),
    ordering_key=st.none() | st.binary(max_size=8) | st.text(max_size=4),
)


@given(specs)
def test_validation_is_total(spec: JobSpec) -> None:
    try:
        result = validate_spec(spec)
    except ValidationError as exc:
        assert exc.field
        assert str(exc).startswith(exc.field + ":")
    else:
        assert result is spec


@given(
    st.dictionaries(
        st.text(max_size=6).filter(lambda s: "\x00" not in s),
        st.floats(allow_nan=False, allow_infinity=False)
        | st.integers()
        | st.text(max_size=6).filter(lambda s: "\x00" not in s),
        max_size=5,
    ),
    priorities,
    st.integers(min_value=1, max_value=1000),
)
def test_well_formed_specs_are_accepted(args: dict[str, Any], priority: int, attempts: int) -> None:
    spec = JobSpec(kind="k", args=args, priority=priority, max_attempts=attempts)
    assert validate_spec(spec) is spec
    assert all(math.isfinite(v) for v in args.values() if isinstance(v, float))
