"""Shared machinery of the in-memory engine: the write protocol and failure routing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters.inmemory.notifier import (
    InMemoryLeaderLock,
    InMemorySubscription,
    LeaderElection,
)
from awa.adapters.inmemory.state import EngineState
from awa.adapters.inmemory.store import CANONICAL_SIDE, SharedStore, StoreState
from awa.domain.batch_ops import BatchOperation
from awa.domain.callbacks import CallbackExpressions
from awa.domain.errors import DatabaseError
from awa.domain.job import JobRecord, RunLease, attempts_exhausted, error_entry
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack, JobFilter

LIVE_STATES = frozenset({JobState.Running, JobState.WaitingExternal})
RUNNING_ONLY = frozenset({JobState.Running})
CANCEL_CHANNEL = "awa:cancel"


def ack(applied: bool) -> Ack:
    return Ack.APPLIED if applied else Ack.STALE


@attrs.define
class Write:
    """One atomic write: a private copy of the state (``state``: this engine's view of
    ``store``) plus the notifications it earns."""

    state: EngineState
    now: datetime
    store: StoreState
    notify: set[str] = attrs.field(factory=set)


def matches(job: JobRecord, filter: JobFilter) -> bool:
    return (
        (filter.kind is None or job.kind == filter.kind)
        and (filter.queue is None or job.queue == filter.queue)
        and (filter.state is None or job.state == filter.state)
        and (filter.tag is None or filter.tag in job.tags)
        and (filter.before_id is None or job.id < filter.before_id)
    )


class EngineBase:
    """State, clock, lock and notification hub, plus the helpers every operation uses.

    ``store`` and ``side``: the engine keeps its jobs on ``side`` of a store it shares
    with other engines (see :mod:`awa.adapters.inmemory.store`); by default it has a store
    of its own."""

    def __init__(
        self,
        clock: Clock,
        backoff: Backoff | None = None,
        *,
        store: SharedStore | None = None,
        side: str = CANONICAL_SIDE,
    ) -> None:
        self._clock = clock
        self._backoff = backoff if backoff is not None else Backoff()
        self._store = store if store is not None else SharedStore()
        self._side = side
        self._lock = self._store.lock
        self._hub = self._store.hub
        self._election = self._store.election
        self._closed = False
        # Batch operations and their item states (job id -> item state), by operation id.
        self._batch_ops: dict[str, BatchOperation] = {}
        self._batch_items: dict[str, dict[int, str]] = {}
        # CEL resolution expressions by callback id (the callback_* columns elsewhere).
        self._callback_exprs: dict[str, CallbackExpressions] = {}

    # ---------------------------------------------------------------- notifier port
    async def subscribe(self, channels: list[str]) -> InMemorySubscription:
        """Listen for ``awa:<queue>`` / ``awa:cancel`` notifications published by writes."""
        return await self._hub.subscribe(channels)

    def leader_lock(self) -> InMemoryLeaderLock:
        """A new candidate for this engine's single maintenance-leader slot."""
        return InMemoryLeaderLock(self._election)

    @property
    def election(self) -> LeaderElection:
        return self._election

    # ---------------------------------------------------------------- write protocol
    def _read(self) -> EngineState:
        """The committed state. It is never mutated in place, so it is safe to scan."""
        if self._closed:
            raise DatabaseError("the in-memory engine is closed")
        return self._store.committed(self._side)

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Write]:
        """Serialize a write, apply it to a copy and commit the copy only on success."""
        async with self._lock:
            self._read()
            copy = self._store.state.copy()
            write = Write(state=copy.view(self._side), now=self._clock.now(), store=copy)
            yield write
            self._store.state = copy
        self._hub.publish(write.notify)

    def _routed_view(self, write: Write) -> EngineState:
        """Where the store routes an insert it makes itself (a cron fire, as
        ``awa.insert_job_compat`` does on Postgres): the side producers write to under the
        store's transition, else this engine's own."""
        side = self._store.producer_side()
        return write.state if side is None or side == self._side else write.store.view(side)

    # ---------------------------------------------------------------- attempt helpers
    @staticmethod
    def _live(
        write: Write, lease: RunLease, states: frozenset[JobState] = LIVE_STATES
    ) -> JobRecord | None:
        """The job if ``lease`` is its current attempt and it is in ``states``, else None."""
        job = write.state.jobs.get(lease.job_id)
        if job is None or job.run_lease != lease.lease or job.state not in states:
            return None
        return job

    @staticmethod
    def _fail_or_dlq(
        write: Write,
        job: JobRecord,
        *,
        errors: tuple[dict[str, Any], ...],
        dlq_reason: str,
        **changes: Any,
    ) -> JobState:
        """Finalize as ``failed``; queues with DLQ enabled hold the failed job instead."""
        failed = write.state.transition(
            job, JobState.Failed, errors=errors, finalized_at=write.now, **changes
        )
        if write.state.dlq_enabled(job.queue):
            write.state.move_to_dlq(failed, reason=dlq_reason, now=write.now)
        return JobState.Failed

    def _retry_or_fail(
        self,
        write: Write,
        job: JobRecord,
        *,
        error: str,
        delay: timedelta | None,
        dlq_reason: str = "max_attempts_exhausted",
        **changes: Any,
    ) -> JobState:
        """Close an attempt as a retryable failure, or fail it when attempts are spent."""
        errors = (*job.errors, error_entry(error, attempt=job.attempt, at=write.now))
        if attempts_exhausted(job.attempt, job.max_attempts):
            return self._fail_or_dlq(write, job, errors=errors, dlq_reason=dlq_reason, **changes)
        wait = delay if delay is not None else self._backoff.delay(job.attempt)
        write.state.transition(
            job, JobState.Retryable, errors=errors, run_at=write.now + wait, **changes
        )
        return JobState.Retryable

    def _cancel(self, write: Write, job: JobRecord) -> JobRecord:
        """Cancel a non-terminal job; a live attempt's worker is told on ``awa:cancel``."""
        cancelled = write.state.transition(job, JobState.Cancelled, finalized_at=write.now)
        if job.state in LIVE_STATES:
            write.notify.add(CANCEL_CHANNEL)
        return cancelled

    @staticmethod
    def _sorted(jobs: Sequence[JobRecord]) -> list[JobRecord]:
        return sorted(jobs, key=lambda job: job.id)
