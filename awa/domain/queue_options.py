"""The queue-config dict ``start()`` accepts, as TypedDicts, so a type checker catches a
misspelt key (``max_wokers``) or a value of the wrong type before the worker runs.

The keys the runtime accepts are read from these classes (``QUEUE_CONFIG_KEYS``,
``RETENTION_KEYS``): a key exists in one place.
"""

from __future__ import annotations

from typing import NotRequired, Required, TypedDict


class RateLimitDict(TypedDict, total=False):
    """A token bucket: ``max_rate`` (or ``rate``) tokens per second, at most ``burst``."""

    max_rate: float
    rate: float
    burst: int


class RetentionDict(TypedDict, total=False):
    """awa-pg's per-queue retention overrides. ``start()`` refuses any value (retention is
    cluster-wide: ``completed_retention_hours`` / ``failed_retention_hours``); the keys
    stay known so the refusal names them rather than calling them unknown."""

    completed_hours: float | None
    failed_hours: float | None


class QueueConfigDict(TypedDict, total=False):
    """One queue for ``start(queues=[...])``: ``name`` and, optionally, its capacity
    (``max_workers``, or ``min_workers`` and ``weight`` with ``global_max_workers``), a
    rate limit, a deadline, priority aging, claim tuning and ``max_running_per_key`` (at
    most that many running jobs per concurrency key across the fleet, ADR 0029),
    ``global_rate_limit`` and ``global_rate_limit_per_key`` (``(max_rate, burst)`` for the
    whole fleet, of the queue and of each concurrency key; ``rate_limit`` is per process)
    (``retention`` overrides are refused: see :class:`RetentionDict`).

    ``PartitionedQueue.queue_configs()`` returns a list of these."""

    name: Required[str]
    max_workers: NotRequired[int | None]
    min_workers: NotRequired[int | None]
    weight: NotRequired[int | None]
    rate_limit: NotRequired[tuple[float, int] | RateLimitDict | None]
    deadline_duration_ms: NotRequired[float | None]
    priority_aging_interval_ms: NotRequired[float | None]
    claimers: NotRequired[int | None]
    claim_batch_size: NotRequired[int | None]
    max_running_per_key: NotRequired[int | None]
    global_rate_limit: NotRequired[tuple[float, int] | RateLimitDict | None]
    global_rate_limit_per_key: NotRequired[tuple[float, int] | RateLimitDict | None]
    retention: NotRequired[RetentionDict | None]


#: Every key a queue-config dict may hold.
QUEUE_CONFIG_KEYS = frozenset(QueueConfigDict.__annotations__)
#: Every key of a queue's ``retention`` dict.
RETENTION_KEYS = frozenset(RetentionDict.__annotations__)
