"""Producer, worker, callback and maintenance operations of the in-memory engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters.inmemory.base import RUNNING_ONLY, EngineBase, Write, ack
from awa.adapters.inmemory.state import EngineState, new_record
from awa.adapters.inmemory.store import StoreState
from awa.adapters.inmemory.transactions import InMemoryTransaction, InMemoryUnitOfWork
from awa.domain import batches, dependencies, lifecycle
from awa.domain.channels import queue_channel
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.flow_control import Admitted, admit_counted, concurrency_key_of, running_by_key
from awa.domain.job import Claim, ClaimBatch, JobRecord, JobSpec, RunLease
from awa.domain.lifecycle import Rescue
from awa.domain.policies import PriorityAging, RetentionFloor
from awa.domain.rate_limits import (
    QUEUE_LIMITER,
    GlobalRateLimit,
    admission,
    advanced,
    key_limiter,
    resume_at,
)
from awa.domain.states import JobState
from awa.domain.unique_conflict import conflict_mode_of, first_run_at, mergeable, merged
from awa.domain.validation import validate_spec
from awa.ports.storage import Ack, Rescued, UnitOfWork


@attrs.frozen
class StoreInsert:
    """An open :meth:`CoreOps.store_insert`: its time and how to insert one job."""

    now: datetime
    insert: Callable[[JobSpec], JobRecord]


class CoreOps(EngineBase):
    """Everything on the hot path: enqueue, claim, attempt outcomes, callbacks, sweeps."""

    # ---------------------------------------------------------------- producers
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[UnitOfWork]:
        """Buffer enqueues; apply them atomically (and notify) only on normal exit."""
        uow = InMemoryUnitOfWork(self)
        try:
            yield uow
        except BaseException:
            uow.open = False
            uow.pending.clear()
            uow.parents.clear()
            raise
        uow.open = False
        await self._commit(uow)

    def unit_of_work_for(self, conn: InMemoryTransaction) -> InMemoryUnitOfWork:
        """:class:`~awa.ports.transactions.TransactionJoiner`: this engine's unit of work
        in a transaction of its store, applied when that transaction commits."""
        return conn.unit_of_work(self, self._commit)

    async def _commit(self, uow: InMemoryUnitOfWork) -> None:
        async with self._write() as write:
            # Re-checks unique keys against whatever committed since the enqueue call.
            for job in uow.pending:
                current = write.state.jobs.get(job.id)
                if current is None:
                    write.state.insert(job)
                else:
                    # A merge into a waiting holder (ADR 0034): on Postgres the holder
                    # stays locked until this commit; here it must still be waiting.
                    self._commit_merge(write.state, current, job)
                if job.state == JobState.Available:
                    write.notify.add(queue_channel(job.queue))
            # Edges are stored at commit against the parents as they are now: a parent
            # that finished since the enqueue call is answered here, as the parent's own
            # finish would have answered it (on Postgres that finish waits for this commit).
            for child, spec in uow.parents.items():
                parents = spec.depends_on
                states = self._parent_states(write.store, write.state, parents)
                satisfied = frozenset(p for p, st in states.items() if st == JobState.Completed)
                deps = write.state.deps
                deps.record(
                    child,
                    parents,
                    satisfied,
                    write.now,
                    dependencies.policies_of(spec),
                    batch_size=batches.size_of(spec.metadata),
                )
                dead = [p for p, st in states.items() if st in dependencies.FINISHED_FAILED]
                if dead:
                    # As the parents' own finish would have answered (for this child, and
                    # again nothing for the others it answered then).
                    gone = [p for p in dead if states[p] == JobState.Cancelled]
                    answered = deps.resolve([], dead, write.now, gone)
                    self._apply_effects(write, dependencies.effects(answered, write.now))
                job = write.state.jobs[child]
                if child not in deps.waits and job.state == JobState.Scheduled and not dead:
                    self._apply_effects(
                        write, dependencies.effects([(child, "released")], write.now)
                    )

    def _parent_states(
        self, store: StoreState, state: EngineState, parents: Sequence[int]
    ) -> dict[int, JobState]:
        """The states of the ``parents`` that exist: on any side of the store (``state``,
        this engine's view, may hold jobs of an open transaction), a DLQ entry as failed."""
        found: dict[int, JobState] = {}
        for parent in parents:
            job = state.jobs.get(parent)
            if job is None:
                job = next((jobs[parent] for jobs in store.sides.values() if parent in jobs), None)
            if job is not None:
                found[parent] = job.state
            elif parent in state.dlq:
                found[parent] = JobState.Failed
        return found

    def _own_uow(self, uow: UnitOfWork) -> InMemoryUnitOfWork:
        if not isinstance(uow, InMemoryUnitOfWork) or uow.owner is not self:
            raise DatabaseError("the unit of work does not belong to this engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> list[JobRecord]:
        """``validated``: the caller already ran ``validate_spec`` on every spec."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        if uow is None:
            async with self._write() as write:
                records = self._insert_all(write.state, specs, write)
            return records
        own = self._own_uow(uow)
        async with self._lock:
            # Conflicts are checked against committed jobs plus this transaction's buffer.
            scratch = self._read().copy()
            for job in own.pending:
                scratch.insert(job)
            records = self._insert_all(scratch, specs, None)
        own.pending.extend(records)
        for record, spec in zip(records, specs, strict=True):
            if spec.depends_on:
                own.parents[record.id] = spec
        return records

    def _insert_all(
        self, state: EngineState, specs: Sequence[JobSpec], write: Write | None
    ) -> list[JobRecord]:
        """Insert into ``state`` (a private copy); raising leaves the id sequence as it was.
        A spec with parents is planned against them (refused, waiting or ready); its edges
        are stored here when ``write`` is given, else when the unit of work commits."""
        now = self._clock.now() if write is None else write.now
        first = self._store.next_id
        plans = []
        for spec in specs:
            if spec.depends_on:
                dependencies.check_spec(spec)
                known = self._parent_states(self._store.state, state, spec.depends_on)
                plans.append(dependencies.plan(spec, known))
            else:
                plans.append(dependencies.Plan(spec, (), frozenset()))
        records: list[JobRecord] = []
        next_id = first
        for planned in plans:
            record = self._merge(state, planned.spec, now)
            if record is None:
                mode = conflict_mode_of(planned.spec.metadata)
                when = first_run_at(mode, planned.spec.run_at, now)
                record = new_record(next_id, attrs.evolve(planned.spec, run_at=when), now)
                next_id += 1
                state.insert(record)
                if write is not None and planned.parents:
                    state.deps.record(
                        record.id,
                        planned.parents,
                        planned.satisfied,
                        now,
                        dependencies.policies_of(planned.spec),
                        batch_size=batches.size_of(planned.spec.metadata),
                    )
            if write is not None and record.state == JobState.Available:
                write.notify.add(queue_channel(record.queue))
            records.append(record)
        self._store.next_id = next_id
        return records

    @staticmethod
    def _commit_merge(state: EngineState, current: JobRecord, job: JobRecord) -> None:
        if not mergeable(current.state, current.id in state.deps.waits):
            raise UniqueConflict(
                f"unique key held by job {current.id}, which is no longer waiting",
                job_id=current.id,
            )
        fields = {
            "args": job.args,
            "run_at": job.run_at,
            "priority": job.priority,
            "tags": job.tags,
            "metadata": job.metadata,
        }
        if job.state == current.state:
            state.update(current, **fields)
        else:
            state.transition(current, job.state, **fields)

    @staticmethod
    def _merge(state: EngineState, spec: JobSpec, now: datetime) -> JobRecord | None:
        """The waiting holder of ``spec``'s key after it took ``spec`` (a ``replace`` or
        ``debounce`` insert, ADR 0034); ``None`` when the insert goes on as a new job
        (no mode, no holder, or a holder that is not waiting: then the insert clashes)."""
        mode = conflict_mode_of(spec.metadata)
        if spec.unique_key is None or not mode.merges or spec.depends_on:
            return None
        holder_id = state.unique.get(spec.unique_key)
        holder = None if holder_id is None else state.jobs.get(holder_id)
        if holder is None or not mergeable(holder.state, holder.id in state.deps.waits):
            return None
        change = merged(
            holder_metadata=holder.metadata,
            holder_created_at=holder.created_at,
            mode=mode,
            args=spec.args,
            run_at=spec.run_at,
            priority=spec.priority,
            tags=tuple(spec.tags),
            metadata=spec.metadata,
            now=now,
        )
        fields = {
            "args": change.args,
            "run_at": change.run_at,
            "priority": change.priority,
            "tags": change.tags,
            "metadata": change.metadata,
        }
        if change.state == holder.state:
            return state.update(holder, **fields)
        return state.transition(holder, change.state, **fields)

    @asynccontextmanager
    async def store_insert(self) -> AsyncIterator[StoreInsert]:
        """One atomic write that inserts jobs as the store itself routes them (a cron
        fire, as ``awa.insert_job_compat`` does on Postgres): what the caller does inside
        it happens under the store's write lock, and the jobs commit only when it exits
        without raising."""
        async with self._write() as write:
            view = self._routed_view(write)

            def insert(spec: JobSpec) -> JobRecord:
                (record,) = self._insert_all(view, [spec], write)
                return record

            yield StoreInsert(now=write.now, insert=insert)

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        for spec in specs:
            validate_spec(spec)
        inserted: list[JobRecord] = []
        async with self._write() as write:
            for spec in specs:
                try:
                    inserted.extend(self._insert_all(write.state, [spec], write))
                except UniqueConflict:
                    continue
        return inserted

    # ---------------------------------------------------------------- workers
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
        if limit <= 0:
            return ClaimBatch()
        async with self._write() as write:
            if write.state.is_paused(queue):
                return ClaimBatch()
            now = write.now
            aging = PriorityAging(aging_interval)
            ready = [
                job
                for job in write.state.jobs.values()
                if job.state == JobState.Available and job.queue == queue and job.run_at <= now
            ]
            ready.sort(
                key=lambda job: (
                    aging.effective_priority(job.priority, job.run_at, now),
                    job.run_at,
                    job.id,
                )
            )
            deadline_at = None if deadline is None else now + deadline
            running = running_by_key(
                (concurrency_key_of(job.metadata), job.state)
                for job in write.state.jobs.values()
                if job.queue == queue
            )
            limiters = write.state.rate_limiters
            keys = sorted(
                {k for j in ready if (k := concurrency_key_of(j.metadata)) is not None}
                if global_rate_limit_per_key is not None
                else ()
            )

            def tat_of(name: str) -> datetime | None:
                found = limiters.get((queue, name))
                return None if found is None else found[0]

            queue_tat = tat_of(QUEUE_LIMITER)
            key_tats = {key_limiter(k): tat_of(key_limiter(k)) for k in keys}
            allowed = admission(
                queue_limit=global_rate_limit,
                queue_tat=queue_tat,
                per_key_limit=global_rate_limit_per_key,
                key_tats=key_tats,
                wanted=limit,
                now=now,
            )
            per_key = allowed.per_key
            key_allowance = None if per_key is None else {k: per_key[key_limiter(k)] for k in keys}

            def admitted(wanted: int) -> Admitted[JobRecord]:
                return admit_counted(
                    ready,
                    key_of=lambda job: concurrency_key_of(job.metadata),
                    running=running,
                    max_running_per_key=max_running_per_key,
                    limit=wanted,
                    key_allowance=key_allowance,
                )

            got = admitted(allowed.limit)
            taken = got.taken
            # The queue's limiter held back what the claim had room and work for.
            held = len(admitted(limit).taken) - len(taken) if allowed.limit < limit else 0
            per_limiter = Counter(
                key_limiter(key)
                for job in taken
                if (key := concurrency_key_of(job.metadata)) is not None
            )
            moved = advanced(
                queue_limit=global_rate_limit,
                queue_tat=queue_tat,
                per_key_limit=global_rate_limit_per_key,
                key_tats=key_tats,
                taken_per_key=dict(per_limiter),
                taken=len(taken),
                now=now,
            )
            for name, tat in moved.items():
                used = global_rate_limit if name == QUEUE_LIMITER else global_rate_limit_per_key
                assert used is not None
                limiters[(queue, name)] = (tat, used)
            claims = ClaimBatch(
                rate_limited=got.rate_limited + held,
                concurrency_limited=got.concurrency_limited,
                next_admission=(
                    resume_at(global_rate_limit, moved.get(QUEUE_LIMITER, queue_tat), now)
                    if global_rate_limit is not None and allowed.limit < limit
                    else None
                ),
            )
            for job in taken:
                live = write.state.transition(
                    job,
                    JobState.Running,
                    attempt=job.attempt + 1,
                    run_lease=job.run_lease + 1,
                    attempted_at=now,
                    heartbeat_at=now,
                    deadline_at=deadline_at,
                )
                claims.append(Claim(job=live, lease=live.lease, deadline_at=deadline_at))
        return claims

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        acks = []
        async with self._write() as write:
            done = lifecycle.complete(write.now)
            for lease in leases:
                job = self._close(write, lease, lambda _job: done)
                acks.append(ack(job is not None))
        return acks

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        async with self._write() as write:
            job = self._close(
                write,
                lease,
                lambda job: lifecycle.retry(
                    self._facts(write, job),
                    error=error,
                    now=write.now,
                    backoff=self._backoff,
                    policies=self._policies,
                    delay=delay,
                ),
            )
        return ack(job is not None)

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        async with self._write() as write:
            snoozed = lifecycle.snooze(delay=delay, now=write.now)
            job = self._close(write, lease, lambda _job: snoozed)
        return ack(job is not None)

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        async with self._write() as write:
            cancelled = lifecycle.cancel(write.now)
            job = self._close(write, lease, lambda _job: cancelled)
        return ack(job is not None)

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        async with self._write() as write:
            job = self._close(
                write,
                lease,
                lambda job: lifecycle.fail(self._facts(write, job), error=error, now=write.now),
            )
        return ack(job is not None)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        async with self._write() as write:
            job = self._close(
                write,
                lease,
                lambda job: lifecycle.release(self._facts(write, job), error=error, now=write.now),
            )
        return ack(job is not None)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        acks = []
        async with self._write() as write:
            for lease in leases:
                job = self._live(write, lease, RUNNING_ONLY)
                if job is not None:
                    write.state.update(job, heartbeat_at=write.now)
                acks.append(ack(job is not None))
        return acks

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        async with self._write() as write:
            job = self._live(write, lease)
            if job is not None:
                write.state.update(
                    job,
                    progress=job.progress if progress is None else dict(progress),
                    metadata={**job.metadata, **(metadata_updates or {})},
                    heartbeat_at=write.now,
                )
        return ack(job is not None)

    # ---------------------------------------------------------------- maintenance
    async def promote_due(self, *, limit: int = 4096) -> int:
        if limit <= 0:
            return 0
        async with self._write() as write:
            due = sorted(
                (
                    job
                    for job in write.state.jobs.values()
                    if job.state in (JobState.Scheduled, JobState.Retryable)
                    and job.run_at <= write.now
                ),
                key=lambda job: (job.run_at, job.id),
            )[:limit]
            for job in due:
                write.state.transition(job, JobState.Available)
                write.notify.add(queue_channel(job.queue))
        return len(due)

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        async with self._write() as write:
            cutoff = write.now - staleness
            stale = [
                job
                for job in write.state.jobs.values()
                if job.state == JobState.Running
                and job.heartbeat_at is not None
                and job.heartbeat_at < cutoff
            ]
            rescued = self._rescue(write, stale, Rescue.HEARTBEAT_STALE)
        return rescued

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        async with self._write() as write:
            expired = [
                job
                for job in write.state.jobs.values()
                if job.state == JobState.Running
                and job.deadline_at is not None
                and job.deadline_at <= write.now
            ]
            rescued = self._rescue(write, expired, Rescue.DEADLINE_EXCEEDED)
        return rescued

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        async with self._write() as write:
            expired = [
                job
                for job in write.state.jobs.values()
                if job.state == JobState.WaitingExternal
                and job.callback_timeout_at is not None
                and job.callback_timeout_at <= write.now
            ]
            rescued = self._rescue(write, expired, Rescue.CALLBACK_TIMEOUT)
        return rescued

    def _rescue(self, write: Write, jobs: list[JobRecord], kind: Rescue) -> list[Rescued]:
        rescued = []
        for job in self._sorted(jobs):
            t = lifecycle.rescue(
                kind,
                self._facts(write, job),
                now=write.now,
                backoff=self._backoff,
                policies=self._policies,
            )
            self._end(write, job, t)
            rescued.append(
                Rescued(
                    lease=job.lease,
                    new_state=t.target(job.state),
                    reason=kind.error,
                    dlq_reason=None if t.dlq_reason is None else t.dlq_reason.value,
                    queue=job.queue,
                    kind=job.kind,
                )
            )
        return rescued

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        floor = RetentionFloor(completed=completed, failed=failed)
        async with self._write() as write:
            expired = sorted(
                (
                    job
                    for job in write.state.jobs.values()
                    if job.finalized_at is not None
                    and floor.is_expired(job.state, job.finalized_at, write.now)
                ),
                key=lambda job: (job.finalized_at, job.id),
            )[: max(batch_size, 0)]
            for job in expired:
                write.state.delete(job.id)
        return len(expired)
