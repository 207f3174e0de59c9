"""Shared machinery of the in-memory engine: the write protocol and failure routing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

import attrs

from awa.adapters.inmemory.notifier import (
    InMemoryLeaderLock,
    InMemorySubscription,
    LeaderElection,
)
from awa.adapters.inmemory.state import EngineState
from awa.adapters.inmemory.store import CANONICAL_SIDE, SharedStore, StoreState
from awa.domain import dependencies, lifecycle
from awa.domain.callbacks import CallbackExpressions
from awa.domain.channels import cancel_notification, queue_channel
from awa.domain.errors import DatabaseError
from awa.domain.job import JobRecord, RunLease
from awa.domain.kind_policies import Effect, KindPolicies
from awa.domain.lifecycle import AttemptFacts, Transition
from awa.domain.policies import Backoff
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack, JobFilter

RUNNING_ONLY = lifecycle.HANDLER_STATES


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
    of its own. ``policies``: the per-kind policies its lifecycle decisions read (shared
    with the process's other engines; a registry of its own by default)."""

    def __init__(
        self,
        clock: Clock,
        backoff: Backoff | None = None,
        *,
        store: SharedStore | None = None,
        side: str = CANONICAL_SIDE,
        policies: KindPolicies | None = None,
    ) -> None:
        self._clock = clock
        self._backoff = backoff if backoff is not None else Backoff()
        self._policies = policies if policies is not None else KindPolicies()
        self._store = store if store is not None else SharedStore()
        self._side = side
        self._lock = self._store.lock
        self._hub = self._store.hub
        self._election = self._store.election
        self._closed = False
        # CEL resolution expressions by callback id (the callback_* columns elsewhere).
        self._callback_exprs: dict[str, CallbackExpressions] = {}

    # ---------------------------------------------------------------- notifier port
    async def subscribe(self, channels: list[str]) -> InMemorySubscription:
        """Listen for ``awa:<queue>`` / ``awa:cancel`` notifications published by writes."""
        return await self._hub.subscribe(channels)

    def leader_lock(self) -> InMemoryLeaderLock:
        """A new candidate for this engine's single maintenance-leader slot."""
        return InMemoryLeaderLock(self._election, self._clock)

    @property
    def store(self) -> SharedStore:
        """The in-memory "database" this engine keeps its jobs in (shared with the other
        engines built on it)."""
        return self._store

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
    def _facts(write: Write, job: JobRecord) -> AttemptFacts:
        return AttemptFacts.of(job, dlq_enabled=write.state.dlq_enabled(job.queue))

    @staticmethod
    def _apply(write: Write, job: JobRecord, transition: Transition) -> JobRecord:
        """Apply a lifecycle transition; a failure routed to the DLQ moves there."""
        target = transition.target(job.state)
        changes = transition.changes(job)
        if target == job.state:
            updated = write.state.update(job, **changes)
        else:
            updated = write.state.transition(job, target, **changes)
        if transition.dlq_reason is not None:
            write.state.move_to_dlq(updated, reason=transition.dlq_reason.value, now=write.now)
        return updated

    def _end(self, write: Write, job: JobRecord, transition: Transition) -> JobRecord:
        """Apply an attempt's transition (outcome, callback resolution or rescue) and, when
        it ended the attempt, the effects on other jobs its kind's rule attaches, in the
        same write."""
        updated = self._apply(write, job, transition)
        if lifecycle.ended_attempt(job.state, updated.state):
            self._apply_effects(write, lifecycle.effects(self._policies, updated))
            self._finished(write, [updated])
        return updated

    def _finished(self, write: Write, jobs: Sequence[JobRecord]) -> None:
        """Release or cancel the children waiting on ``jobs``, which just finished (or
        not: a retry or a snooze answers nothing), in the same write (ADR 0032)."""
        completed: list[int] = []
        failed: list[int] = []
        cancelled: list[int] = []
        for job in jobs:
            done, dead = dependencies.finished(job.state)
            if done:
                completed.append(job.id)
            elif dead:
                failed.append(job.id)
                if job.state == JobState.Cancelled:
                    cancelled.append(job.id)
        if completed or failed:
            answered = write.state.deps.resolve(completed, failed, write.now, cancelled)
            self._apply_effects(write, dependencies.effects(answered, write.now))

    def _retried(self, write: Write, job_ids: Sequence[int]) -> None:
        """The jobs the failure of ``job_ids``, retried in this write, held wait again,
        level by level, as ``awa.dependency_retried`` answers them (ADR 0032)."""
        frontier = list(job_ids)
        restored: list[int] = []
        while frontier:
            held = write.state.deps.retried(frontier, restored)
            answered = [(child, dependencies.DependentOutcome.RESTORED) for child in held]
            frontier = restored = self._apply_effects(
                write, dependencies.effects(answered, write.now)
            )

    def _apply_effects(self, write: Write, effects: Sequence[Effect]) -> list[int]:
        """Apply effects on other jobs, wherever the store holds them (a child may sit on
        the other side of a store under a storage transition); answers the jobs changed."""
        changed_ids: list[int] = []
        for effect in effects:
            side = write.state
            target = side.jobs.get(effect.job_id)
            if target is None:
                for jobs in write.store.sides.values():
                    if effect.job_id in jobs:
                        target = jobs[effect.job_id]
                        side = EngineState(
                            jobs=jobs,
                            dlq=write.state.dlq,
                            unique=write.state.unique,
                            queues=write.state.queues,
                            deps=write.state.deps,
                            rate_limiters=write.state.rate_limiters,
                        )
                        break
            if target is None or not effect.transition.applies(target.state):
                continue
            changed = self._apply(attrs.evolve(write, state=side), target, effect.transition)
            changed_ids.append(target.id)
            if changed.state is JobState.Available:
                write.notify.add(queue_channel(target.queue))
            if lifecycle.ended_attempt(target.state, changed.state):
                write.notify.add(cancel_notification(target.id, target.run_lease)[0])
        return changed_ids

    def _close(
        self, write: Write, lease: RunLease, decide: Callable[[JobRecord], Transition]
    ) -> JobRecord | None:
        """Apply the transition ``decide`` makes for the attempt ``lease`` names; ``None``
        (nothing changed) when the lease is stale or the transition does not apply."""
        job = self._live(write, lease)
        if job is None:
            return None
        transition = decide(job)
        if not transition.applies(job.state):
            return None
        self._end(write, job, transition)
        return job

    def _cancel(
        self, write: Write, job: JobRecord, transition: Transition, *, resolve: bool = True
    ) -> JobRecord:
        """Apply an operator's cancel (or a drain's) to a job it applies to; a live
        attempt's worker is told on ``awa:cancel``. ``resolve`` false leaves the jobs
        waiting on it to the caller (a drain answers them once all its jobs are
        cancelled)."""
        if not transition.applies(job.state):
            return job
        cancelled = self._apply(write, job, transition)
        if job.state in LIVE_STATES:
            # The in-memory hub carries channels only; the payload has no reader here.
            channel, _payload = cancel_notification(job.id, job.run_lease)
            write.notify.add(channel)
        if resolve:
            # The jobs waiting on it are cancelled with it (ADR 0032).
            self._finished(write, [cancelled])
        return cancelled

    @staticmethod
    def _sorted(jobs: Sequence[JobRecord]) -> list[JobRecord]:
        return sorted(jobs, key=lambda job: job.id)
