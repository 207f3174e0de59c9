"""Ordering-key partitioning: ordering-key hashing, enqueue-shard selection and client-side
partitioned queues. (Not the routing engine, which is `awa/adapters/routing`.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.queue_options import QueueConfigDict

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211
PARTITION_DOMAIN = 0x9D4D1B2F53A70C91
MAX_PARTITIONS = 32767
MIN_SHARDS = 1
MAX_SHARDS = 64
#: What an ordering key may be: its bytes, or a str routed as UTF-8.
OrderingKey = bytes | bytearray | memoryview | str


def key_bytes(key: OrderingKey) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise ValidationTypeError(
        "ordering_key",
        f"ordering_key must be bytes-like or str, got {type(key).__name__}",
        value=key,
    )


def ordering_hash(key: OrderingKey) -> int:
    """64-bit FNV-style rolling hash: multiply by the prime, then add the byte."""
    h = FNV_OFFSET
    for byte in key_bytes(key):
        h = (h * FNV_PRIME + byte) & _MASK64
    return h


def mix64(value: int) -> int:
    """The SplitMix64 output finalizer alone (no gamma step), as awa-pg applies it."""
    z = value & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def shard_for_key(key: OrderingKey, shards: int) -> int:
    """Enqueue shard of an ordering key inside one queue: ``hash % shards``."""
    if shards <= 1:
        return 0
    return ordering_hash(key) % shards


def partition_for_key(key: OrderingKey, partitions: int) -> int:
    """Partition index: domain-separated from the shard hash so the two never correlate.

    Producers of awa-pg and of this package route a key to the same physical queue, so a
    fleet mixing both keeps per-key FIFO (recorded values in ``tests/fixtures``)."""
    return mix64(ordering_hash(key) ^ PARTITION_DOMAIN) % partitions


def physical_queue_name(logical: str, index: int) -> str:
    return logical if index == 0 else f"{logical}__p{index}"


def _check_logical(logical_queue: object) -> None:
    if not isinstance(logical_queue, str):
        raise ValidationTypeError(
            "logical_queue", f"{type(logical_queue).__name__!r} object is not an instance of 'str'"
        )
    if not logical_queue:
        raise ValidationError("logical_queue", "partitioned queue logical queue must not be empty")


def _index_like(field: str, value: object) -> int:
    """An int argument; anything else (floats, strings, bools) is a type error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(
            field, f"{type(value).__name__!r} object cannot be interpreted as an integer"
        )
    return value


class PartitionedQueue:
    """One logical queue spread over physical queues ``q``, ``q__p1``, ``q__p2``, ...

    Routing is client-side: producers pick the physical queue, workers configure each one.
    """

    def __init__(self, logical_queue: str, partitions: int) -> None:
        _check_logical(logical_queue)
        count = _index_like("partitions", partitions)
        if count <= 0:
            raise ValidationError(
                "partitions", f"partitioned queue partitions must be > 0, got {count}"
            )
        if count > MAX_PARTITIONS:
            raise ValidationError(
                "partitions",
                f"partitioned queue supports at most {MAX_PARTITIONS} physical queues; got {count}",
            )
        self._logical = logical_queue
        self._queues = [physical_queue_name(logical_queue, i) for i in range(count)]

    @classmethod
    def from_physical_queues(
        cls, logical_queue: str, physical_queues: Sequence[str]
    ) -> PartitionedQueue:
        """A partitioned queue over explicitly named physical queues, in routing order.

        The names need not follow the ``q``, ``q__p1`` scheme (an existing fleet's queues
        can be adopted as they are); they must be distinct non-empty strings.
        """
        _check_logical(logical_queue)
        if isinstance(physical_queues, str | bytes) or not isinstance(physical_queues, Sequence):
            raise ValidationTypeError(
                "physical_queues",
                f"must be a list of queue names, got {type(physical_queues).__name__}",
            )
        names = list(physical_queues)
        if not names:
            raise ValidationError("physical_queues", "partitioned queue partitions must be > 0")
        if len(names) > MAX_PARTITIONS:
            raise ValidationError(
                "physical_queues",
                f"partitioned queue supports at most {MAX_PARTITIONS} physical queues; "
                f"got {len(names)}",
            )
        seen: set[str] = set()
        for name in names:
            if not isinstance(name, str):
                raise ValidationTypeError(
                    "physical_queues", f"{type(name).__name__!r} object is not an instance of 'str'"
                )
            if not name:
                raise ValidationError(
                    "physical_queues", "partitioned queue physical queue must not be empty"
                )
            if name in seen:
                raise ValidationError(
                    "physical_queues", f"partitioned queue physical queue {name!r} is duplicated"
                )
            seen.add(name)
        queue = cls.__new__(cls)
        queue._logical = logical_queue
        queue._queues = names
        return queue

    @property
    def logical_queue(self) -> str:
        return self._logical

    @property
    def physical_queues(self) -> list[str]:
        return list(self._queues)

    @property
    def partitions(self) -> int:
        return len(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def __repr__(self) -> str:
        return f'PartitionedQueue(logical_queue="{self._logical}", partitions={self.partitions})'

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PartitionedQueue)
            and other._logical == self._logical
            and other._queues == self._queues
        )

    def __hash__(self) -> int:
        return hash((self._logical, tuple(self._queues)))

    def queue_for_key(self, key: OrderingKey) -> str:
        return self._queues[partition_for_key(key, self.partitions)]

    def queue_for_index(self, index: int) -> str:
        """The physical queue of round-robin position ``index`` (an int >= 0)."""
        position = _index_like("index", index)
        if position < 0:
            raise ValidationError("index", f"index must be >= 0, got {position}")
        return self._queues[position % self.partitions]

    def route_by_key(self, key: OrderingKey) -> dict[str, Any]:
        return {"queue": self.queue_for_key(key), "ordering_key": key_bytes(key)}

    def route_by_index(self, index: int) -> dict[str, Any]:
        return {"queue": self.queue_for_index(index)}

    def queue_configs(
        self,
        max_workers_per_partition: int | None = None,
        *,
        min_workers_per_partition: int | None = None,
        weight: int = 1,
        rate_limit_per_partition: tuple[float, int] | None = None,
        priority_aging_interval_ms: int | None = None,
        deadline_duration_ms: int | None = None,
        claimers: int | None = None,
        claim_batch_size: int | None = None,
    ) -> list[QueueConfigDict]:
        """One ``start()`` queue config dict per physical queue.

        Exactly one of ``max_workers_per_partition`` (hard-reserved capacity) and
        ``min_workers_per_partition`` (weighted mode, with ``weight``) sizes each queue;
        ``weight``, ``claimers`` and ``claim_batch_size`` must be > 0."""
        if max_workers_per_partition is not None and min_workers_per_partition is not None:
            raise ValidationError(
                "max_workers_per_partition",
                "max_workers_per_partition and min_workers_per_partition are mutually exclusive",
            )
        if max_workers_per_partition is None and min_workers_per_partition is None:
            raise ValidationError(
                "max_workers_per_partition",
                "queue_configs requires max_workers_per_partition or min_workers_per_partition",
            )
        for field, value in (
            ("weight", weight),
            ("claimers", claimers),
            ("claim_batch_size", claim_batch_size),
        ):
            if value is not None and _index_like(field, value) <= 0:
                raise ValidationError(field, f"{field} must be > 0, got {value}", value=value)
        most, least = max_workers_per_partition, min_workers_per_partition
        if most is not None and _index_like("max_workers_per_partition", most) <= 0:
            raise ValidationError(
                "max_workers_per_partition", f"max_workers_per_partition must be > 0, got {most}"
            )
        if least is not None and _index_like("min_workers_per_partition", least) < 0:
            raise ValidationError(
                "min_workers_per_partition", f"min_workers_per_partition must be >= 0, got {least}"
            )
        configs: list[QueueConfigDict] = []
        for queue in self._queues:
            config = QueueConfigDict(name=queue)
            if min_workers_per_partition is not None:
                config["min_workers"] = min_workers_per_partition
                config["weight"] = weight
            else:
                config["max_workers"] = max_workers_per_partition
            if rate_limit_per_partition is not None:
                config["rate_limit"] = rate_limit_per_partition
            if priority_aging_interval_ms is not None:
                config["priority_aging_interval_ms"] = priority_aging_interval_ms
            if deadline_duration_ms is not None:
                config["deadline_duration_ms"] = deadline_duration_ms
            if claimers is not None:
                config["claimers"] = claimers
            if claim_batch_size is not None:
                config["claim_batch_size"] = claim_batch_size
            configs.append(config)
        return configs
