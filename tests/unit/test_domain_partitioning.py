"""Ordering-key hashing, shard selection and partitioned queues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awa.domain import PartitionedQueue, ValidationError, ordering_hash, shard_for_key
from awa.domain.partitioning import (
    FNV_OFFSET,
    FNV_PRIME,
    MAX_PARTITIONS,
    PARTITION_DOMAIN,
    key_bytes,
    mix64,
    partition_for_key,
    physical_queue_name,
)

MASK64 = 2**64 - 1


def test_hash_constants_match_the_published_algorithm() -> None:
    assert FNV_OFFSET == 14695981039346656037
    assert FNV_PRIME == 1099511628211
    assert PARTITION_DOMAIN == 0x9D4D1B2F53A70C91


def test_empty_key_hashes_to_the_offset_basis() -> None:
    assert ordering_hash(b"") == 14695981039346656037


def test_one_byte_key_is_multiply_then_add() -> None:
    expected = (14695981039346656037 * 1099511628211 + 0x61) % 2**64
    assert expected == 12638153115695167552
    assert ordering_hash(b"a") == expected


def test_two_byte_key() -> None:
    h = (14695981039346656037 * 1099511628211 + 0x61) & MASK64
    h = (h * 1099511628211 + 0x62) & MASK64
    assert ordering_hash(b"ab") == h == 590790720448369954


def test_str_keys_hash_as_utf8() -> None:
    assert ordering_hash("user-42") == ordering_hash(b"user-42") == 17640239916434121035
    assert ordering_hash("é") == ordering_hash("é".encode())


def test_key_bytes_refuses_other_types() -> None:
    with pytest.raises(ValidationError, match="ordering_key must be bytes-like or str") as info:
        key_bytes(42)  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError)
    assert info.value.field == "ordering_key"


@pytest.mark.parametrize("key", [object(), 42, None, ["a"]])
def test_queue_for_key_refuses_what_is_not_a_key(key: object) -> None:
    pq = PartitionedQueue("q", 4)
    for call in (pq.queue_for_key, pq.route_by_key):
        with pytest.raises(ValidationError, match="ordering_key must be bytes-like or str"):
            call(key)  # type: ignore[arg-type]


def test_bytes_like_keys_route_as_their_bytes() -> None:
    pq = PartitionedQueue("q", 16)
    assert pq.queue_for_key(bytearray(b"user-42")) == pq.queue_for_key(b"user-42")
    assert pq.queue_for_key(memoryview(b"user-42")) == pq.queue_for_key(b"user-42")


def test_mix64_is_the_splitmix64_finalizer_without_the_gamma_step() -> None:
    # The reference SplitMix64 generator's first output from seed 0 is the finalizer
    # applied to 0 + gamma; the finalizer alone keeps 0 at 0.
    assert mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    assert mix64(0) == 0


AWA_PG_ROUTES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "awa_pg_route_by_key.json").read_text("utf-8")
)


@pytest.mark.parametrize("partitions", list(AWA_PG_ROUTES["physical_index"]))
def test_route_by_key_matches_what_awa_pg_recorded(partitions: str) -> None:
    """Values observed from awa-pg 0.6.9 (tests/differential/record_route_by_key.py)."""
    pq = PartitionedQueue("orders", int(partitions))
    keys = [bytes.fromhex(k) for k in AWA_PG_ROUTES["keys_hex"]]
    expected = AWA_PG_ROUTES["physical_index"][partitions]
    assert len(keys) == len(expected) > 300
    names = pq.physical_queues
    mismatched = [
        (k, want, names.index(pq.route_by_key(k)["queue"]))
        for k, want in zip(keys, expected, strict=True)
        if names[want] != pq.route_by_key(k)["queue"]
    ]
    assert mismatched == []


def test_str_keys_route_like_awa_pg() -> None:
    pq = PartitionedQueue("orders", 16)
    got = [pq.physical_queues.index(pq.queue_for_key(k)) for k in AWA_PG_ROUTES["str_keys"]]
    assert got == AWA_PG_ROUTES["str_physical_index_16"]


def test_shard_is_hash_mod_shards() -> None:
    for key in (b"", b"a", b"user-42", b"order:1"):
        assert shard_for_key(key, 8) == ordering_hash(key) % 8
    assert shard_for_key(b"user-42", 8) == 3


@pytest.mark.parametrize("shards", [0, 1, -3])
def test_one_or_fewer_shards_is_always_shard_zero(shards: int) -> None:
    assert shard_for_key(b"user-42", shards) == 0


def test_partition_is_domain_separated_mix() -> None:
    h = ordering_hash(b"user-42")
    assert partition_for_key(b"user-42", 16) == mix64(h ^ PARTITION_DOMAIN) % 16


def test_routing_is_stable_across_calls() -> None:
    keys = [f"customer-{i}".encode() for i in range(200)]
    first = [(shard_for_key(k, 7), partition_for_key(k, 13)) for k in keys]
    again = [(shard_for_key(k, 7), partition_for_key(k, 13)) for k in keys]
    assert first == again
    assert {p for _, p in first} == set(range(13))


# ---------------------------------------------------------------- partitioned queues


def test_physical_names() -> None:
    assert physical_queue_name("q", 0) == "q"
    assert physical_queue_name("q", 3) == "q__p3"
    pq = PartitionedQueue("q", 3)
    assert pq.physical_queues == ["q", "q__p1", "q__p2"]
    assert pq.logical_queue == "q"
    assert pq.partitions == len(pq) == 3
    assert repr(pq) == 'PartitionedQueue(logical_queue="q", partitions=3)'


def test_physical_queues_is_a_copy() -> None:
    pq = PartitionedQueue("q", 2)
    pq.physical_queues.append("oops")
    assert pq.physical_queues == ["q", "q__p1"]


def test_single_partition_is_the_logical_queue() -> None:
    pq = PartitionedQueue("emails", 1)
    assert pq.queue_for_key(b"anything") == "emails"
    assert pq.queue_for_index(99) == "emails"


def test_queue_for_key_and_index() -> None:
    pq = PartitionedQueue("orders", 16)
    assert pq.queue_for_key("user-42") == pq.queue_for_key(b"user-42")
    assert pq.queue_for_index(0) == "orders"
    assert pq.queue_for_index(17) == "orders__p1"


def test_route_helpers() -> None:
    pq = PartitionedQueue("orders", 16)
    assert pq.route_by_key("user-42") == {
        "queue": pq.queue_for_key(b"user-42"),
        "ordering_key": b"user-42",
    }
    assert pq.route_by_index(2) == {"queue": "orders__p2"}


def test_equality_and_hash() -> None:
    assert PartitionedQueue("q", 2) == PartitionedQueue("q", 2)
    assert PartitionedQueue("q", 2) != PartitionedQueue("q", 3)
    assert PartitionedQueue("q", 2) != PartitionedQueue("r", 2)
    assert len({PartitionedQueue("q", 2), PartitionedQueue("q", 2)}) == 1


@pytest.mark.parametrize("partitions", [0, -1, MAX_PARTITIONS + 1])
def test_partition_count_bounds(partitions: int) -> None:
    with pytest.raises(ValidationError) as info:
        PartitionedQueue("q", partitions)
    assert info.value.field == "partitions"


def test_partition_count_extremes_are_accepted() -> None:
    assert PartitionedQueue("q", MAX_PARTITIONS).physical_queues[-1] == "q__p32766"


@pytest.mark.parametrize("partitions", [True, 2.0, "2"])
def test_partition_count_must_be_an_int(partitions: object) -> None:
    with pytest.raises(TypeError, match="cannot be interpreted as an integer") as info:
        PartitionedQueue("q", partitions)  # type: ignore[arg-type]
    assert isinstance(info.value, ValidationError)
    assert info.value.field == "partitions"


@pytest.mark.parametrize(
    ("partitions", "words"),
    [
        (0, "partitioned queue partitions must be > 0"),
        (-3, "partitioned queue partitions must be > 0"),
        (MAX_PARTITIONS + 1, "partitioned queue supports at most 32767 physical queues"),
    ],
)
def test_partition_count_messages(partitions: int, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        PartitionedQueue("q", partitions)


def test_round_robin_index_is_validated() -> None:
    pq = PartitionedQueue("q", 3)
    with pytest.raises(ValidationError, match="index must be >= 0"):
        pq.route_by_index(-1)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        pq.route_by_index(1.5)  # type: ignore[arg-type]
    assert pq.route_by_index(4) == {"queue": "q__p1"}


def test_queue_configs_refuse_zero_capacity() -> None:
    with pytest.raises(ValidationError, match="max_workers_per_partition must be > 0"):
        PartitionedQueue("q", 2).queue_configs(0)


def test_logical_queue_must_be_non_empty() -> None:
    with pytest.raises(ValidationError, match="logical queue must not be empty") as info:
        PartitionedQueue("", 2)
    assert info.value.field == "logical_queue"
    with pytest.raises(TypeError):
        PartitionedQueue(3, 2)  # type: ignore[arg-type]


def test_from_physical_queues_round_trip() -> None:
    pq = PartitionedQueue.from_physical_queues("q", ["q", "q__p1", "q__p2"])
    assert pq == PartitionedQueue("q", 3)


def test_from_physical_queues_takes_explicit_names() -> None:
    pq = PartitionedQueue.from_physical_queues("orders", ["orders_eu", "orders_us", "orders_ap"])
    assert pq.physical_queues == ["orders_eu", "orders_us", "orders_ap"]
    assert pq.logical_queue == "orders"
    assert pq.route_by_index(4) == {"queue": "orders_us"}
    assert pq.queue_for_key("k") in pq.physical_queues
    assert pq != PartitionedQueue("orders", 3)
    assert [c["name"] for c in pq.queue_configs(2)] == pq.physical_queues


@pytest.mark.parametrize(
    ("names", "error", "words"),
    [
        ([], ValidationError, "partitioned queue partitions must be > 0"),
        (["a", "a"], ValidationError, "physical queue 'a' is duplicated"),
        ([""], ValidationError, "physical queue must not be empty"),
        ("abc", TypeError, "must be a list of queue names"),
        (["a", 1], TypeError, "'int' object is not an instance of 'str'"),
    ],
)
def test_from_physical_queues_refuses_bad_lists(
    names: list[str], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words) as info:
        PartitionedQueue.from_physical_queues("q", names)
    assert isinstance(info.value, ValidationError)
    assert info.value.field == "physical_queues"


def test_queue_configs_need_a_size() -> None:
    with pytest.raises(
        ValidationError,
        match="queue_configs requires max_workers_per_partition or min_workers_per_partition",
    ):
        PartitionedQueue("q", 2).queue_configs()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_workers_per_partition": 2, "weight": 0}, "weight"),
        ({"min_workers_per_partition": 1, "weight": 0}, "weight"),
        ({"min_workers_per_partition": 1, "weight": -2}, "weight"),
        ({"max_workers_per_partition": 2, "claimers": 0}, "claimers"),
        ({"max_workers_per_partition": 2, "claim_batch_size": 0}, "claim_batch_size"),
    ],
)
def test_queue_configs_refuse_zero_weight_claimers_and_batch(
    options: dict[str, int], field: str
) -> None:
    with pytest.raises(ValidationError, match=f"{field} must be > 0") as info:
        PartitionedQueue("q", 2).queue_configs(**options)  # type: ignore[arg-type]
    assert info.value.field == field


def test_queue_configs_with_options() -> None:
    configs = PartitionedQueue("q", 2).queue_configs(
        4,
        rate_limit_per_partition=(5.0, 10),
        priority_aging_interval_ms=1000,
        deadline_duration_ms=30000,
        claimers=2,
        claim_batch_size=8,
    )
    assert configs[1] == {
        "name": "q__p1",
        "max_workers": 4,
        "rate_limit": (5.0, 10),
        "priority_aging_interval_ms": 1000,
        "deadline_duration_ms": 30000,
        "claimers": 2,
        "claim_batch_size": 8,
    }


def test_queue_configs_weighted_mode() -> None:
    configs = PartitionedQueue("q", 2).queue_configs(min_workers_per_partition=1, weight=3)
    assert configs == [
        {"name": "q", "min_workers": 1, "weight": 3},
        {"name": "q__p1", "min_workers": 1, "weight": 3},
    ]


def test_queue_configs_max_and_min_are_mutually_exclusive() -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        PartitionedQueue("q", 2).queue_configs(4, min_workers_per_partition=1)
