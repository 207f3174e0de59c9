"""The storage port: everything the runtime and the admin surfaces ask of an engine.

Every engine (in-memory model, canonical Postgres, queue-storage Postgres) implements
:class:`StorageEngine` with identical observable semantics; the contract suite in
``tests/contract`` is the executable form of these docstrings.

Conventions shared by every method:

* Time comes from the engine's :class:`~awa.ports.clock.Clock`; no method takes ``now``.
* Methods that mutate a live attempt take a :class:`~awa.domain.RunLease`
  ``(job_id, lease)``. If the job's current run lease differs, or the job is no longer
  ``running`` / ``waiting_external``, the call changes nothing and reports
  :attr:`Ack.STALE`. Stale is an answer, never an exception.
* Batch methods return one result per input, in input order.
* Errors raised are ``AwaError`` subclasses: ``UniqueConflict`` on a unique-key clash,
  ``ValidationError`` for bad input, ``DatabaseError`` for infrastructure failures.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from awa.domain.admin_views import KindCounts, QueueDepth, QueueStateBucket, StateBucket
from awa.domain.batch_ops import BatchFilter, BatchSpec, ItemResult
from awa.domain.callbacks import CallbackExpressions
from awa.domain.job import Claim, DlqEntry, JobRecord, JobSpec, QueueCounts, RunLease
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.states import JobState
from awa.domain.transition import TransitionObservation


class Ack(enum.Enum):
    """Result of a guarded mutation."""

    APPLIED = "applied"
    STALE = "stale"


class UnitOfWork(Protocol):
    """An engine transaction. Enqueues made through it become visible (and wake listeners)
    only when it commits; on rollback the jobs never existed."""


@attrs.frozen
class JobFilter:
    """Filter for admin reads and bulk operations; ``None`` fields match everything.

    ``before_id`` keeps only jobs whose id is lower (the cursor of a newest-first page)."""

    kind: str | None = None
    queue: str | None = None
    state: JobState | None = None
    tag: str | None = None
    before_id: int | None = None


@attrs.frozen
class DlqFilter:
    kind: str | None = None
    queue: str | None = None
    tag: str | None = None
    before_id: int | None = None
    before_dlq_at: datetime | None = None

    @property
    def is_empty(self) -> bool:
        """Whether the filter matches every entry (no kind, queue or tag given)."""
        return self.kind is None and self.queue is None and self.tag is None


@attrs.frozen
class Rescued:
    """An attempt closed by a rescue sweep and where the job went: ``dlq_reason`` is
    the DLQ reason when the failed job moved into the DLQ (its queue has the DLQ
    enabled), else ``None``. ``queue`` and ``kind`` are the job's."""

    lease: RunLease
    new_state: JobState
    reason: str
    dlq_reason: str | None = None
    queue: str | None = None
    kind: str | None = None


@attrs.frozen
class VanishedStep:
    """What one step of the search for vanished parents did (ADR 0032, "A parent that
    vanishes"): where the next step starts (``None``: from the first parent again) and
    how many parents it answered as cancelled."""

    following: int | None
    answered: int


class StorageEngine(Protocol):
    # ------------------------------------------------------------------ producers
    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """Open a unit of work; commit on normal exit, roll back on exception."""
        ...

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None
    ) -> list[JobRecord]:
        """Insert jobs (already validated) and return their snapshots, in input order.

        A spec with ``run_at`` set starts ``scheduled`` (deferred); otherwise ``available``.
        Ids increase in input order. Within a lane ``(queue, priority, shard)`` claim order
        is insert order. With ``uow`` the insert joins that transaction; otherwise it
        commits on its own. A unique-key clash with a job in a masked state raises
        ``UniqueConflict`` and inserts none of the batch.
        """
        ...

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """Like :meth:`enqueue_many` without a transaction, but a spec whose unique key is
        already held is skipped silently (the COPY compat path). Returns inserted jobs."""
        ...

    # ------------------------------------------------------------------ workers
    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` ``available`` jobs of ``queue`` whose ``run_at <= now``.

        Order: lowest effective priority (aging applied at claim time from the time the
        job became runnable), then ``run_at``, then insert order. Nothing is claimed from a
        paused queue. Each claimed job becomes ``running`` with ``attempt + 1``,
        ``run_lease + 1``, ``attempted_at = heartbeat_at = now`` and ``deadline_at = now +
        deadline`` (``None`` when no deadline). Concurrent callers never receive the same
        attempt.

        With ``max_running_per_key``, a job with a concurrency key is claimed only while
        fewer than that many attempts of its key (in the queue) are ``running`` or
        ``waiting_external``, counted in the claim's own transaction across every caller,
        and the candidates are taken as :func:`awa.domain.flow_control.admit` orders
        them (each key's first job before any key's second; ADR 0029).

        With ``global_rate_limit`` the claim takes at most what the queue's fleet-wide
        limiter admits, and with ``global_rate_limit_per_key`` at most what each keyed
        job's key limiter admits (keyless jobs are not limited by it): the limiters are
        read, and moved forward by what was taken, in the claim's own transaction, so
        every caller shares them (:mod:`awa.domain.rate_limits`). An engine may return a
        :class:`~awa.domain.job.ClaimBatch` saying what the limits held back.
        """
        ...

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        """Mark attempts ``completed`` (``finalized_at = now``, progress cleared)."""
        ...

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        """Close a failed attempt, append ``error`` to the job's errors and make it
        ``retryable`` at ``now + delay`` (``delay=None``: the engine's backoff for the
        attempt). If ``attempt >= max_attempts`` the job becomes ``failed`` instead (or
        moves to the DLQ with reason ``max_attempts_exhausted`` when the queue has DLQ
        enabled). Progress is kept."""
        ...

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        """Return the job to ``scheduled`` at ``now + delay`` without spending an attempt
        (``attempt`` goes back by one); no error is recorded."""
        ...

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        """The handler asked to cancel: the job becomes ``cancelled``."""
        ...

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        """Terminal failure: append ``error`` (marked terminal) and make the job
        ``failed``, or move it to the DLQ (reason ``terminal_error``) when enabled."""
        ...

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        """Give an attempt back without running it to completion (shutdown): the job
        becomes ``retryable`` due now, the attempt is not spent and ``error`` is recorded."""
        ...

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        """Refresh ``heartbeat_at = now`` for live attempts."""
        ...

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        """Persist progress (replaces) and shallow-merge ``metadata_updates`` into
        metadata; also refreshes the heartbeat."""
        ...

    # ------------------------------------------------------------------ callbacks
    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        """Attach an external callback id with ``callback_timeout_at = now + timeout`` and
        the (already checked) CEL resolution ``expressions``, replacing earlier ones."""
        ...

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        """The expressions of the live attempt carrying ``callback_id``; ``None`` when it
        has none. ``CallbackNotFound`` when no live attempt carries the id."""
        ...

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        """Park a running attempt with a registered callback in ``waiting_external``."""
        ...

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        """Resolve a waiting (or still running) attempt by callback id (``expression``:
        the CEL expression that decided a ``fail``, recorded in the error entry).

        ``action`` is ``complete``, ``fail``, ``retry`` or ``resume`` (back to
        ``running``, payload stored in metadata ``_awa_callback_result``). Raises
        ``CallbackNotFound`` when no live attempt carries the id."""
        ...

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        """Push a callback's timeout to ``now + timeout``; ``CallbackNotFound`` if none."""
        ...

    # ------------------------------------------------------------------ maintenance
    async def promote_due(self, *, limit: int = 4096) -> int:
        """Make due ``scheduled`` / ``retryable`` jobs ``available`` (oldest ``run_at``
        first, at most ``limit``) and wake their queues. Returns how many moved."""
        ...

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        """Close ``running`` attempts whose heartbeat is older than ``staleness`` as a
        retryable failure (``heartbeat stale``); exhausted ones fail (or go to the DLQ)."""
        ...

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        """Close ``running`` attempts whose ``deadline_at`` has passed (``deadline
        exceeded``), as for heartbeat rescue."""
        ...

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        """Close ``waiting_external`` attempts past ``callback_timeout_at`` (``callback
        timed out``): retried, or failed / DLQ'd when attempts are exhausted."""
        ...

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        """Delete at most ``batch_size`` terminal jobs finalized longer ago than their
        retention (``completed`` for completed and cancelled, ``failed`` for failed)."""
        ...

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        """Delete at most ``batch_size`` DLQ entries older than ``retention``."""
        ...

    # ------------------------------------------------------------------ admin reads
    async def get_job(self, job_id: int) -> JobRecord | None:
        """The job, or ``None`` if it does not exist (DLQ'd jobs are not jobs)."""
        ...

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """Matching jobs, newest (highest id) first."""
        ...

    async def queue_counts(self) -> list[QueueCounts]:
        """Exact per-state counts for every queue that has jobs or queue metadata,
        ordered by queue name."""
        ...

    async def queue_depths(self) -> list[QueueDepth]:
        """Per queue, a cheap reading for metrics: jobs per state of ``DEPTH_STATES`` and
        the run_at of the oldest available job, ordered by queue name. Never counts
        finished jobs; each engine reads the cheapest figures it keeps. Queue storage
        counts available jobs as the lanes' head-cursor differences, so a job retired
        (cancelled, deleted, moved) above a cursor is counted until the cursor passes it:
        available is at least the exact count and equal to it when no such job is
        left; the other states come from the folded counters. Its oldest run_at is read
        at each lane's cursor (one probe per lane), so a lane whose later rows became due
        earlier (a promoted retry behind a fresh insert) reports its first row's, later
        than the exact oldest; with the count exact it is the run_at of one of the
        queue's available jobs. Canonical storage counts its live rows. Queues with no
        live job may be absent."""
        ...

    async def kind_counts(self) -> list[KindCounts]:
        """Per job kind: how many jobs exist in any state, in how many distinct queues,
        and how many completed within the last hour; ordered by kind. Exact (a scan):
        callers that poll cache it."""
        ...

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        """Jobs that became ``completed``, ``failed`` or ``cancelled`` within the last
        ``window``, counted per UTC minute (``bucket`` = start of the minute) and state,
        ordered by bucket then state name. Minutes with no finalization are absent."""
        ...

    async def finalized_by_queue(self, *, window: timedelta) -> list[QueueStateBucket]:
        """Jobs that became ``completed``, ``failed`` or ``cancelled`` per UTC minute,
        queue and state, over whole minutes from ``first_minute(now, window)`` on,
        ordered by minute, queue, then state name; minutes with none are absent.

        Completed jobs are counted even after their rows are gone while the engine keeps
        per-minute completion counts: queue storage prunes completed rows within minutes
        but keeps its completion buckets for two hours, so a window up to an hour is
        whole there; canonical storage and the in-memory model count the rows they
        still hold (``completed_retention``). Failed and cancelled jobs are counted from
        the rows still held. Jobs in the DLQ are not jobs: see ``dlq_by_minute``."""
        ...

    async def dlq_by_minute(self, *, window: timedelta) -> list[QueueStateBucket]:
        """The DLQ entries whose job failed (``finalized_at``) in a whole minute from
        ``first_minute(now, window)`` on, per minute and queue (state ``failed``),
        ordered like ``finalized_by_queue``: the failures moved out of the jobs."""
        ...

    # ------------------------------------------------------------------ admin writes
    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        """Stop claims from ``queue`` (enqueue still works). Idempotent."""
        ...

    async def resume_queue(self, queue: str) -> None:
        """Allow claims from ``queue`` again. Idempotent."""
        ...

    async def drain_queue(self, queue: str) -> int:
        """Cancel every scheduled / available / retryable / waiting_external job of the
        queue (running attempts are untouched). Returns how many were cancelled."""
        ...

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        """Opt a queue in (or out) of dead-letter routing for exhausted/terminal jobs."""
        ...

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        """Cancel a job that is not yet terminal; a live attempt becomes ``cancelled``
        and its worker is told via ``awa:cancel``. Returns the job (unchanged if it was
        already terminal), or ``None`` if it does not exist."""
        ...

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        """Cancel the non-terminal job holding ``unique_key``; ``None`` if there is none."""
        ...

    async def retry_job(self, job_id: int) -> JobRecord | None:
        """Operator retry (``lifecycle.operator_retry``): a failed / cancelled job becomes
        ``available`` now with a fresh attempt budget (``attempt = 0``); a waiting one is
        retried as ``retry_external``. Returns ``None`` for a missing job; any other job
        (completed, running, available, scheduled, retryable) is returned unchanged."""
        ...

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        """Operator retry of every ``failed`` job matching ``filter`` (kind / queue)."""
        ...

    async def discard_failed(self, kind: str) -> int:
        """Delete every ``failed`` job of ``kind``; returns how many."""
        ...

    async def pruned_failed_count(self, queue: str) -> int | None:
        """How many ``failed`` jobs of ``queue`` retention has dropped so far (cumulative,
        ``0`` when none), or ``None`` when this engine does not count them."""
        ...

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        """Delete jobs by id (any state except live attempts); returns how many."""
        ...

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        """One bounded step of the maintenance leader's search for parents that left
        without finishing while children still wait on them (a ``DELETE`` on ``awa.jobs``
        in SQL, or a delete by an earlier release): a page of at most ``limit`` parents
        of unresolved edges after parent id ``after`` is read, those no engine holds are
        recorded as seen now; those a SQL delete recorded, and those first seen gone at or
        before ``seen_before`` and still gone, have their children answered as
        :meth:`delete_jobs` answers them (ADR 0032, "A parent that vanishes")."""
        ...

    # ------------------------------------------------------------------ DLQ
    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        """Move a ``failed`` job into the DLQ; ``None`` if it is not a failed job."""
        ...

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        """Move every ``failed`` job matching ``filter`` (its ``state`` is ignored) into the
        DLQ with ``reason``, in one atomic step; returns how many moved."""
        ...

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        """Newest first by ``(dlq_at, job id)``; ``before_*`` give the next page."""
        ...

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        """The DLQ entry of job ``job_id``, or ``None`` when the job is not in the DLQ."""
        ...

    async def list_dead_lettered(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        """The jobs the DLQ holds that match ``filter`` (kind, queue, state, tag,
        ``before_id``), each as it was when it moved (``get_dlq(id).job``, normally
        ``failed``), highest id first: what :meth:`list_jobs` leaves out, in its order, so
        a caller can merge the two into one newest-first page."""
        ...

    async def dlq_depth(self, queue: str | None = None) -> int:
        """How many DLQ entries there are (of ``queue`` only, when given)."""
        ...

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        """``(queue, depth)`` for every queue with DLQ entries, ordered by queue."""
        ...

    async def dlq_depth_by_kind(self) -> list[tuple[str, str, int]]:
        """``(kind, queue, depth)`` for every kind and queue with DLQ entries, ordered by
        kind then queue (the kind list counts dead-lettered jobs, as awa-pg does)."""
        ...

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        """Take a job out of the DLQ and re-enqueue it with ``attempt = 0`` and
        ``run_lease = 0`` (same id); ``run_at`` makes it scheduled. ``None`` if absent."""
        ...

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        """:meth:`retry_from_dlq` (available now, same queue and priority) for every entry
        matching ``filter``, lowest job id first, in one atomic step; returns how many."""
        ...

    async def purge_dlq(self, filter: DlqFilter) -> int:
        """Delete matching DLQ entries; returns how many."""
        ...

    async def purge_dlq_job(self, job_id: int) -> bool:
        """Delete job ``job_id``'s DLQ entry; ``False`` when it had none."""
        ...

    # ------------------------------------------------------------------ batch targets
    # What a batch operation changes lives with the jobs, so each engine answers for its
    # own; the operations themselves are kept by :class:`~awa.ports.batch_ops.BatchOperationStore`.
    async def count_batch_targets(self, filter: BatchFilter) -> int:
        """How many queued (available / scheduled) jobs match ``filter``."""
        ...

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        """Queued jobs matching ``filter`` with ``id > after_id``, lowest id first. The
        same compiled filter as :meth:`count_batch_targets` (preview equals execution)."""
        ...

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        """Apply :func:`awa.domain.batch_ops.batch_change` to the job as it is now, under
        the engine's claim exclusion: ``processed`` when it changed, ``skipped`` when it is
        no longer queued or already there, ``missing`` when this engine does not hold it.
        A moved available job joins the tail of its new lane and wakes its queue. Errors
        raise; the runner records them per item."""
        ...

    # ------------------------------------------------------------------ lifecycle
    async def reset(self) -> None:
        """Delete every job, DLQ entry, unique claim, queue setting and dependency edge
        (tests, ``clean``)."""
        ...

    async def close(self) -> None:
        """Release what the engine holds (its connections, and its pool when it owns one);
        the engine takes no calls afterwards."""
        ...


@runtime_checkable
class StripedClaimer(Protocol):
    """An engine that stores a logical queue as stripes ``queue#0 .. queue#(N-1)``
    (queue storage; ADR 0006, "Stripes"). A striped dispatcher claims one stripe per call,
    rotating ``stripe`` so none starves; engines without it claim the logical queue."""

    async def claim_stripe(
        self,
        queue: str,
        stripe: int,
        stripes: int,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        """:meth:`StorageEngine.claim` on stripe ``stripe`` (of ``stripes``) of the logical
        queue ``queue`` only."""
        ...


@runtime_checkable
class WorkerWarmUp(Protocol):
    """An engine that can get a worker's hot statements ready before its first jobs
    arrive: open the connections its claims and completions use and plan their
    statements there, so the first jobs do not pay for a cold backend. Best effort."""

    async def warm_up(self, queues: Sequence[str]) -> None:
        """Ready the claim and completion statements of ``queues`` (best effort: a failure
        is the caller's to log and ignore)."""
        ...


@runtime_checkable
class TransitionObserver(Protocol):
    """An engine that follows the storage transition (the routing engine) and can say
    where it stands: status, canonical backlog while a transition is under way, whether
    the target schema is installed and the live runtimes by capability. A few small
    reads; the maintenance leader reports it as the ``awa.storage.*`` gauges."""

    async def observe_transition(self) -> TransitionObservation:
        """Where the storage transition stands now, read afresh."""
        ...
