"""The values every queue-storage operation shares: a job's resolved snapshot, what one
transaction accumulates, and a snapshot as the inserts read it.

A job is a chain of immutable facts (ADR 0006). Operations read the job's resolved
snapshot, decide the next snapshot exactly as the reference model would, and then
*append* the facts that express it (:mod:`.facts`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from awa.adapters._pg.rows import job_from_row
from awa.domain.channels import queue_channel
from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import JobState, mask_to_bitstring

DEFERRED = frozenset({JobState.Scheduled, JobState.Retryable})
#: First key of the prune gate, a transaction-level advisory lock (two-int form; the second
#: key is the schema's hash). Prune holds it exclusively while it decides what happens to
#: the jobs of the slot it reclaims; a change to a terminal job takes it shared.
PRUNE_GATE = 0x61776170


def minute_of(value: datetime) -> datetime:
    """The UTC minute a completion is counted in (``completions`` buckets)."""
    return value.astimezone(UTC).replace(second=0, microsecond=0)


def iso(value: datetime | None) -> str | None:
    """A timestamp as the JSON inputs of the inserts carry it."""
    return None if value is None else value.isoformat()


def _hex(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).hex()


def row_json(job: JobRecord, ordering_key: bytes | None = None, **extra: Any) -> dict[str, Any]:
    """A snapshot as one object of the ``jsonb_to_recordset`` input the inserts read."""
    data: dict[str, Any] = {
        "job_id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "args": job.args,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "heartbeat_at": iso(job.heartbeat_at),
        "deadline_at": iso(job.deadline_at),
        "attempted_at": iso(job.attempted_at),
        "finalized_at": iso(job.finalized_at),
        "created_at": iso(job.created_at),
        "errors": list(job.errors),
        "metadata": job.metadata,
        "tags": list(job.tags),
        "unique_key": _hex(job.unique_key),
        "unique_states": None
        if job.unique_states is None
        else mask_to_bitstring(job.unique_states),
        "callback_id": job.callback_id,
        "callback_timeout_at": iso(job.callback_timeout_at),
        "run_lease": job.run_lease,
        "progress": job.progress,
        "ordering_key": _hex(ordering_key),
        "state": job.state.sql_name,
    }
    data.update(extra)
    return data


@attrs.frozen
class Resolved:
    """A job's current snapshot plus where its head fact lives."""

    job: JobRecord
    ordering_key: bytes | None
    ready_slot: int | None
    ready_fact: int | None
    claim_id: int | None
    open_claim: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Resolved:
        key = row.get("ordering_key")
        return cls(
            job=job_from_row(row),
            ordering_key=None if key is None else bytes(key),
            ready_slot=row["ready_slot"],
            ready_fact=row["ready_fact"],
            claim_id=row["claim_id"],
            open_claim=bool(row["open_claim"]),
        )


class Writes:
    """What one transaction accumulates: counter deltas, unique changes, notifications."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counts: Counter[tuple[str, str]] = Counter()
        self.completions: Counter[tuple[str, datetime]] = Counter()
        self.notify: set[tuple[str, str]] = set()

    def completed(self, queue: str, finalized_at: datetime | None, delta: int) -> None:
        """Count a job entering (+1) or leaving (-1) ``completed`` in its minute bucket."""
        if finalized_at is not None:
            self.completions[(queue, minute_of(finalized_at))] += delta

    def move(self, old: JobRecord | None, new: JobRecord | None) -> None:
        if old is not None:
            self.counts[(old.queue, old.state.sql_name)] -= 1
            if old.state == JobState.Completed:
                self.completed(old.queue, old.finalized_at, -1)
        if new is not None:
            self.counts[(new.queue, new.state.sql_name)] += 1
            if new.state == JobState.Completed:
                self.completed(new.queue, new.finalized_at, 1)
            if new.state == JobState.Available:
                self.notify.add((queue_channel(new.queue), ""))

    def absorb(self, other: Writes) -> None:
        """Add what ``other`` accumulated (a part of this transaction that committed)."""
        self.counts.update(other.counts)
        self.completions.update(other.completions)
        self.notify |= other.notify


def new_record(
    job_id: int, spec: JobSpec, now: datetime, *, stamp: datetime | None = None
) -> JobRecord:
    """The snapshot of a job just enqueued with id ``job_id`` at ``now``; ``stamp``, when
    given, is the run_at an available job got under its lane's lock (``lane_stamp``)."""
    return JobRecord(
        id=job_id,
        kind=spec.kind,
        queue=spec.queue,
        args=spec.args,
        state=JobState.Available if spec.run_at is None else JobState.Scheduled,
        priority=spec.priority,
        attempt=0,
        max_attempts=spec.max_attempts,
        run_at=(stamp or now) if spec.run_at is None else spec.run_at,
        created_at=now,
        metadata=dict(spec.metadata),
        tags=tuple(spec.tags),
        unique_key=spec.unique_key,
        unique_states=spec.effective_unique_states,
    )


def restamped(job: JobRecord, moved: Mapping[int, datetime]) -> JobRecord:
    """``job`` with the run_at its lane gave it, if that moved (``FactWriter.place``)."""
    run_at = moved.get(job.id)
    return job if run_at is None else attrs.evolve(job, run_at=run_at)


#: The completion bucket where prune counts the completed jobs it drops (negative): the
#: other buckets keep every completion of a minute (``finalized_by_queue``), the sum of
#: all of them what is still held (``completed_last_hour``).
PRUNED_COMPLETIONS_BUCKET = 16
