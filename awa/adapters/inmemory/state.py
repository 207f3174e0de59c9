"""The in-memory engine's data: jobs, DLQ entries, unique claims and queue settings.

:class:`EngineState` is copied for every write and swapped in whole on success, so a
write that raises half-way (a unique conflict, an illegal transition) leaves the
committed state untouched and readers never observe a partial change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from awa.adapters.inmemory.dependencies import DependencyBook
from awa.domain.errors import UniqueConflict
from awa.domain.job import DlqEntry, JobRecord, JobSpec, initial_state
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.states import JobState, check_transition
from awa.domain.unique import holds_unique_key


@attrs.frozen
class QueueMeta:
    """Operator settings of one queue (the ``queue_meta`` row of the SQL engines)."""

    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str | None = None
    dlq_enabled: bool = False


def new_record(job_id: int, spec: JobSpec, now: datetime) -> JobRecord:
    """The snapshot of a freshly enqueued job."""
    return JobRecord(
        id=job_id,
        kind=spec.kind,
        queue=spec.queue,
        args=spec.args,
        state=initial_state(spec.run_at),
        priority=spec.priority,
        attempt=0,
        max_attempts=spec.max_attempts,
        run_at=now if spec.run_at is None else spec.run_at,
        created_at=now,
        metadata=dict(spec.metadata),
        tags=tuple(spec.tags),
        unique_key=spec.unique_key,
        unique_states=spec.effective_unique_states,
    )


@attrs.define
class EngineState:
    """Everything the engine stores. Mutate only a :meth:`copy`, never the committed one."""

    jobs: dict[int, JobRecord] = attrs.field(factory=dict)
    dlq: dict[int, DlqEntry] = attrs.field(factory=dict)
    unique: dict[bytes, int] = attrs.field(factory=dict)
    queues: dict[str, QueueMeta] = attrs.field(factory=dict)
    deps: DependencyBook = attrs.field(factory=DependencyBook)
    #: Fleet-wide rate limiters' theoretical arrival time, by (queue, limiter name)
    #: (the ``awa.rate_limiters`` rows of the SQL engines).
    rate_limiters: dict[tuple[str, str], tuple[datetime, GlobalRateLimit]] = attrs.field(
        factory=dict
    )

    def copy(self) -> EngineState:
        return EngineState(
            jobs=dict(self.jobs),
            dlq=dict(self.dlq),
            unique=dict(self.unique),
            queues=dict(self.queues),
            deps=self.deps.copy(),
            rate_limiters=dict(self.rate_limiters),
        )

    def clear(self) -> None:
        """Forget every job, DLQ entry, unique claim and queue setting (in place)."""
        self.jobs.clear()
        self.dlq.clear()
        self.unique.clear()
        self.queues.clear()
        self.deps.clear()
        self.rate_limiters.clear()

    # ---------------------------------------------------------------- queue settings
    def meta(self, queue: str) -> QueueMeta:
        return self.queues.get(queue, QueueMeta())

    def is_paused(self, queue: str) -> bool:
        return self.meta(queue).paused

    def dlq_enabled(self, queue: str) -> bool:
        return self.meta(queue).dlq_enabled

    # ---------------------------------------------------------------- job rows
    def insert(self, job: JobRecord) -> JobRecord:
        """Add a job (fresh or back from the DLQ), claiming its unique key if needed."""
        self._reconcile_unique(None, job)
        self.jobs[job.id] = job
        return job

    def delete(self, job_id: int) -> JobRecord | None:
        """Remove a job and release the unique key it held."""
        job = self.jobs.pop(job_id, None)
        if job is not None:
            self._reconcile_unique(job, None)
        return job

    def transition(self, job: JobRecord, new_state: JobState, **changes: Any) -> JobRecord:
        """Change a job's state through the domain's transition table.

        Raises ``IllegalTransition`` for a change the table refuses and ``UniqueConflict``
        when entering a masked state whose key another job holds.
        """
        check_transition(job.state, new_state)
        updated = attrs.evolve(job, state=new_state, **changes)
        self._reconcile_unique(job, updated)
        self.jobs[job.id] = updated
        return updated

    def update(self, job: JobRecord, **changes: Any) -> JobRecord:
        """Change fields other than the state."""
        if "state" in changes:
            raise ValueError("state changes must go through transition()")
        updated = attrs.evolve(job, **changes)
        self.jobs[job.id] = updated
        return updated

    def _reconcile_unique(self, old: JobRecord | None, new: JobRecord | None) -> None:
        old_holds = old is not None and holds_unique_key(old)
        new_holds = new is not None and holds_unique_key(new)
        if new is not None and new_holds and not old_holds:
            assert new.unique_key is not None
            holder = self.unique.get(new.unique_key)
            if holder is not None and holder != new.id:
                raise UniqueConflict(f"unique key already held by job {holder}", job_id=holder)
            self.unique[new.unique_key] = new.id
        elif old is not None and old_holds and not new_holds:
            assert old.unique_key is not None
            if self.unique.get(old.unique_key) == old.id:
                del self.unique[old.unique_key]

    # ---------------------------------------------------------------- dead-letter queue
    def move_to_dlq(self, job: JobRecord, *, reason: str, now: datetime) -> DlqEntry:
        """Hold a failed job in the DLQ; it stops being a job (and frees its key)."""
        self.delete(job.id)
        entry = DlqEntry(job=job, reason=reason, dlq_at=now, original_run_lease=job.run_lease)
        self.dlq[job.id] = entry
        return entry
