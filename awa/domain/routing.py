"""Ordering-key hashing, enqueue-shard selection and client-side partitioned queues."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awa.domain.errors import ValidationError

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211
PARTITION_DOMAIN = 0x9D4D1B2F53A70C91
MAX_PARTITIONS = 32767
MIN_SHARDS = 1
MAX_SHARDS = 64


def key_bytes(key: bytes | str) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"ordering key must be bytes or str, got {type(key).__name__}")


def ordering_hash(key: bytes | str) -> int:
    """64-bit FNV-style rolling hash: multiply by the prime, then add the byte."""
    h = FNV_OFFSET
    for byte in key_bytes(key):
        h = (h * FNV_PRIME + byte) & _MASK64
    return h


def splitmix64(value: int) -> int:
    z = (value + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def shard_for_key(key: bytes | str, shards: int) -> int:
    """Enqueue shard of an ordering key inside one queue: ``hash % shards``."""
    if shards <= 1:
        return 0
    return ordering_hash(key) % shards


def partition_for_key(key: bytes | str, partitions: int) -> int:
    """Partition index: domain-separated from the shard hash so the two never correlate."""
    return splitmix64(ordering_hash(key) ^ PARTITION_DOMAIN) % partitions


def physical_queue_name(logical: str, index: int) -> str:
    return logical if index == 0 else f"{logical}__p{index}"


class PartitionedQueue:
    """One logical queue spread over physical queues ``q``, ``q__p1``, ``q__p2``, ...

    Routing is client-side: producers pick the physical queue, workers configure each one.
    """

    def __init__(self, logical_queue: str, partitions: int) -> None:
        if not isinstance(logical_queue, str) or not logical_queue:
            raise ValidationError("logical_queue", "must be a non-empty string")
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise ValidationError("partitions", "must be an integer")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValidationError(
                "partitions", f"must be between 1 and {MAX_PARTITIONS}, got {partitions}"
            )
        self._logical = logical_queue
        self._queues = [physical_queue_name(logical_queue, i) for i in range(partitions)]

    @classmethod
    def from_physical_queues(
        cls, logical_queue: str, physical_queues: Sequence[str]
    ) -> PartitionedQueue:
        """Rebuild a partitioned queue from its physical names, which must be in canonical order."""
        expected = [physical_queue_name(logical_queue, i) for i in range(len(physical_queues))]
        if list(physical_queues) != expected:
            raise ValidationError(
                "physical_queues",
                f"must be {expected!r} for logical queue {logical_queue!r}",
            )
        return cls(logical_queue, len(physical_queues))

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
        return f"PartitionedQueue(logical_queue={self._logical!r}, partitions={self.partitions})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PartitionedQueue)
            and other._logical == self._logical
            and other.partitions == self.partitions
        )

    def __hash__(self) -> int:
        return hash((self._logical, self.partitions))

    def queue_for_key(self, key: bytes | str) -> str:
        return self._queues[partition_for_key(key, self.partitions)]

    def queue_for_index(self, index: int) -> str:
        return self._queues[index % self.partitions]

    def route_by_key(self, key: bytes | str) -> dict[str, Any]:
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
    ) -> list[dict[str, Any]]:
        """One ``start()`` queue config dict per physical queue."""
        if max_workers_per_partition is not None and min_workers_per_partition is not None:
            raise ValidationError(
                "max_workers_per_partition",
                "max_workers_per_partition and min_workers_per_partition are mutually exclusive",
            )
        configs: list[dict[str, Any]] = []
        for queue in self._queues:
            config: dict[str, Any] = {"name": queue}
            if min_workers_per_partition is not None:
                config["min_workers"] = min_workers_per_partition
                config["weight"] = weight
            else:
                config["max_workers"] = (
                    10 if max_workers_per_partition is None else max_workers_per_partition
                )
            optional = {
                "rate_limit": rate_limit_per_partition,
                "priority_aging_interval_ms": priority_aging_interval_ms,
                "deadline_duration_ms": deadline_duration_ms,
                "claimers": claimers,
                "claim_batch_size": claim_batch_size,
            }
            config.update({k: v for k, v in optional.items() if v is not None})
            configs.append(config)
        return configs
