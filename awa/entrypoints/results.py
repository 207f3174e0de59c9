"""Result and value types returned by the client, plus the batch-operation TypedDicts."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypedDict

from awa.domain.stripes import DEFAULT_QUEUE_STRIPES
from awa.domain.validation import CLAIM_SLOT_COUNT, LEASE_SLOT_COUNT, QUEUE_SLOT_COUNT
from awa.entrypoints.job import Job

DEFAULT_QUEUE_STORAGE_SCHEMA = "awa"
DEFAULT_QUEUE_STORAGE_QUEUE_SLOT_COUNT = QUEUE_SLOT_COUNT
DEFAULT_QUEUE_STORAGE_LEASE_SLOT_COUNT = LEASE_SLOT_COUNT
DEFAULT_QUEUE_STORAGE_CLAIM_SLOT_COUNT = CLAIM_SLOT_COUNT
DEFAULT_QUEUE_STORAGE_QUEUE_STRIPE_COUNT = DEFAULT_QUEUE_STRIPES

BatchOperationKind = Literal["set_priority", "move_queue"]
BatchOperationState = Literal[
    "pending", "scanning", "running", "cancelling", "completed", "cancelled", "failed"
]


class BatchOperationFilter(TypedDict, total=False):
    """Which jobs a batch operation touches."""

    kind: str
    queue: str
    ids: list[int]
    tag: str
    state: str
    created_at_gte: datetime | str
    created_at_lt: datetime | str


class BatchOperationPreview(TypedDict, total=False):
    """How many jobs a batch operation would touch, with a sample."""

    total_matched: int
    sample: list[dict[str, Any]]


class BatchOperation(TypedDict, total=False):
    """A submitted batch operation and its progress."""

    id: str
    op_kind: str
    filter: dict[str, Any]
    spec: dict[str, Any]
    state: str
    submitted_by: str | None
    submitted_at: str
    started_at: str | None
    finalized_at: str | None
    cursor: dict[str, Any] | None
    total_matched: int | None
    processed: int
    skipped: int
    errored: int
    last_error: str | None
    runner_instance: str | None
    retention_until: str | None
    updated_at: str


class QueueStat:
    """Per-queue counts, lag and pause flag."""

    __slots__ = (
        "available",
        "completed_last_hour",
        "failed",
        "lag_seconds",
        "paused",
        "queue",
        "rate_limited",
        "retryable",
        "running",
        "scheduled",
        "total_queued",
        "waiting_external",
    )

    def __init__(
        self,
        *,
        queue: str,
        total_queued: int,
        scheduled: int,
        available: int,
        retryable: int,
        running: int,
        failed: int,
        waiting_external: int,
        completed_last_hour: int,
        lag_seconds: float | None,
        paused: bool,
        rate_limited: int = 0,
    ) -> None:
        self.queue = queue
        self.total_queued = total_queued
        self.scheduled = scheduled
        self.available = available
        self.retryable = retryable
        self.running = running
        self.failed = failed
        self.waiting_external = waiting_external
        self.completed_last_hour = completed_last_hour
        self.lag_seconds = lag_seconds
        self.paused = paused
        #: available jobs the queue's fleet-wide rate limit (``global_rate_limit``) holds
        #: back right now: more than its limiter admits at this instant (ADR 0029)
        self.rate_limited = rate_limited

    def __repr__(self) -> str:
        return (
            f"QueueStat(queue={self.queue!r}, total_queued={self.total_queued}, "
            f"available={self.available}, running={self.running}, failed={self.failed}, "
            f"paused={self.paused})"
        )


class QueueHealth:
    """Capacity and load of one queue in a running worker."""

    __slots__ = ("available", "in_flight", "max_workers", "min_workers", "overflow_held", "weight")

    def __init__(
        self,
        *,
        in_flight: int,
        available: int,
        max_workers: int | None = None,
        min_workers: int | None = None,
        weight: int | None = None,
        overflow_held: int | None = None,
    ) -> None:
        self.in_flight = in_flight
        self.available = available
        self.max_workers = max_workers
        self.min_workers = min_workers
        self.weight = weight
        self.overflow_held = overflow_held

    def __repr__(self) -> str:
        return (
            f"QueueHealth(in_flight={self.in_flight}, available={self.available}, "
            f"max_workers={self.max_workers})"
        )


class HealthCheck:
    """Health of the client and, when started, its worker runtime."""

    __slots__ = (
        "healthy",
        "heartbeat_alive",
        "leader",
        "poll_loop_alive",
        "postgres_connected",
        "queues",
        "shutting_down",
    )

    def __init__(
        self,
        *,
        healthy: bool,
        postgres_connected: bool,
        poll_loop_alive: bool,
        heartbeat_alive: bool,
        shutting_down: bool,
        leader: bool,
        queues: dict[str, QueueHealth],
    ) -> None:
        self.healthy = healthy
        self.postgres_connected = postgres_connected
        self.poll_loop_alive = poll_loop_alive
        self.heartbeat_alive = heartbeat_alive
        self.shutting_down = shutting_down
        self.leader = leader
        self.queues = queues

    def __repr__(self) -> str:
        return (
            f"HealthCheck(healthy={self.healthy}, postgres_connected={self.postgres_connected}, "
            f"leader={self.leader}, queues={sorted(self.queues)})"
        )


class RetryFailedResult:
    """Jobs retried by ``retry_failed``; ``pruned_failed_count`` is ``None`` when unknown."""

    __slots__ = ("jobs", "matched", "pruned_failed_count")

    def __init__(self, jobs: list[Job[Any]], matched: int, pruned_failed_count: int | None) -> None:
        self.jobs = jobs
        self.matched = matched
        self.pruned_failed_count = pruned_failed_count

    def __repr__(self) -> str:
        return (
            f"RetryFailedResult(jobs={len(self.jobs)}, matched={self.matched}, "
            f"pruned_failed_count={self.pruned_failed_count})"
        )


class DlqEntry:
    """A job held in the dead-letter queue."""

    __slots__ = ("dlq_at", "job", "original_run_lease", "reason")

    def __init__(self, job: Job[Any], reason: str, dlq_at: datetime, original_run_lease: int):
        self.job = job
        self.reason = reason
        self.dlq_at = dlq_at
        self.original_run_lease = original_run_lease

    def __repr__(self) -> str:
        return f"DlqEntry(job_id={self.job.id}, reason={self.reason!r}, dlq_at={self.dlq_at})"


class ResolveResult:
    """Outcome of ``resolve_callback``: ``completed``, ``failed`` or ``ignored``."""

    __slots__ = ("job", "outcome", "payload", "reason")

    def __init__(
        self, outcome: str, job: Job[Any] | None, payload: Any, reason: str | None = None
    ) -> None:
        self.outcome = outcome
        self.job = job
        self.payload = payload
        self.reason = reason

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_ignored(self) -> bool:
        return self.outcome == "ignored"

    def __repr__(self) -> str:
        return f"ResolveResult(outcome={self.outcome!r}, reason={self.reason!r})"
