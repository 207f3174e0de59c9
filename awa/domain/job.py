"""Job value types: what a producer asks for, what storage holds, and attempt identity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain.states import DEFAULT_UNIQUE_STATES, JobState

DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 2
DEFAULT_MAX_ATTEMPTS = 25


def initial_state(run_at: datetime | None) -> JobState:
    """The state a new job starts in: ``scheduled`` when it names a ``run_at`` (any
    instant; promotion makes a due one available), else ``available``."""
    return JobState.Available if run_at is None else JobState.Scheduled


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _frozen_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen
class JobSpec:
    """A job a producer wants enqueued. Validate with :func:`awa.domain.validation.validate_spec`.

    ``run_at`` set (to any value) means the job starts ``scheduled`` in the deferred backlog.
    """

    kind: str
    args: Any = attrs.field(factory=dict)
    queue: str = DEFAULT_QUEUE
    priority: int = DEFAULT_PRIORITY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    run_at: datetime | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_dict)
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    unique_key: bytes | None = None
    unique_states: int | None = None
    ordering_key: bytes | None = None
    #: Ids of jobs this one waits on (ADR 0032); it runs once all of them completed.
    depends_on: tuple[int, ...] = ()
    #: What each parent's failure does to this job, aligned with ``depends_on``
    #: (``awa.domain.dependencies.OnParentFailure`` values); empty: every parent ``cancel``.
    on_parent_failure: tuple[str, ...] = ()

    @property
    def effective_unique_states(self) -> int:
        return DEFAULT_UNIQUE_STATES if self.unique_states is None else self.unique_states


@attrs.frozen
class Lane:
    """A FIFO lane: jobs of one queue, one priority and one enqueue shard."""

    queue: str
    priority: int
    shard: int = 0


@attrs.frozen(order=True)
class RunLease:
    """Identity of one attempt: every mutation of a live attempt names both numbers.

    A mutation whose ``lease`` no longer matches the job's current run lease is stale and
    changes nothing.
    """

    job_id: int
    lease: int


@attrs.frozen
class JobRecord:
    """A snapshot of a job as storage holds it (the columns of ``awa.jobs``)."""

    id: int
    kind: str
    queue: str
    args: Any
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    heartbeat_at: datetime | None = None
    deadline_at: datetime | None = None
    attempted_at: datetime | None = None
    finalized_at: datetime | None = None
    errors: tuple[dict[str, Any], ...] = ()
    metadata: dict[str, Any] = attrs.field(factory=dict)
    tags: tuple[str, ...] = ()
    unique_key: bytes | None = None
    unique_states: int | None = None
    callback_id: str | None = None
    callback_timeout_at: datetime | None = None
    run_lease: int = 0
    progress: dict[str, Any] | None = None

    @property
    def lease(self) -> RunLease:
        return RunLease(self.id, self.run_lease)


@attrs.frozen
class Claim:
    """A claimed attempt: the job (now ``running``) and the lease that guards it;
    ``shard`` is the enqueue shard of the lane it came from, where storage has lanes."""

    job: JobRecord
    lease: RunLease
    deadline_at: datetime | None
    shard: int | None = None


class ClaimBatch(list[Claim]):
    """The claims of one ``claim`` call, in claim order, and what the fleet-wide limits
    held back from it (ADR 0029): ``rate_limited`` and ``concurrency_limited`` count the
    jobs a claim left waiting although it had room for them, because a
    ``global_rate_limit`` had no tokens or a key was at its ``max_running_per_key``;
    ``next_admission`` is when the queue's rate limiter admits a job again (``None``: it
    is not what held the claim back)."""

    def __init__(
        self,
        claims: Iterable[Claim] = (),
        *,
        rate_limited: int = 0,
        concurrency_limited: int = 0,
        next_admission: datetime | None = None,
    ) -> None:
        super().__init__(claims)
        self.rate_limited = rate_limited
        self.concurrency_limited = concurrency_limited
        self.next_admission = next_admission


@attrs.frozen
class Receipt:
    """Evidence that an attempt was claimed: who, when and until when."""

    lease: RunLease
    queue: str
    claimed_at: datetime
    deadline_at: datetime | None


@attrs.frozen
class DlqEntry:
    """A job held in the dead-letter queue (not a job state)."""

    job: JobRecord
    reason: str
    dlq_at: datetime
    original_run_lease: int


@attrs.frozen
class QueueCounts:
    """Exact per-state counts of one queue plus its control flags."""

    queue: str
    counts: dict[JobState, int]
    paused: bool
    completed_last_hour: int
    oldest_available_at: datetime | None

    def count(self, state: JobState) -> int:
        return self.counts.get(state, 0)

    @property
    def total_queued(self) -> int:
        return (
            self.count(JobState.Scheduled)
            + self.count(JobState.Available)
            + self.count(JobState.Retryable)
        )

    def lag(self, now: datetime) -> timedelta | None:
        if self.oldest_available_at is None:
            return None
        return max(timedelta(0), now - self.oldest_available_at)
