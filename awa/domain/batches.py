"""Batches (ADR 0035): jobs inserted together with a callback job that runs once, after
every one of them finished, and reads how many completed, failed and were cancelled.

A batch is stored as dependencies (ADR 0032): the callback waits on every member
through an edge whose policy is ``run`` (a member's failure counts as done), so it is
released exactly once, in the transaction that finishes the last member, by the same
count-down under the wait row's lock as any fan-in. Each edge keeps how its member
ended (:class:`MemberOutcome`); the counts are read from the edges, which outlive the
members' rows. This module holds the size cap, the callback's marker and the counts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from awa.domain import dependencies
from awa.domain.dependencies import OnParentFailure, check_spec
from awa.domain.errors import ValidationError
from awa.domain.job import JobSpec
from awa.domain.states import JobState

#: The most jobs one batch may hold (each is an edge the callback's insert locks and
#: plans in one transaction).
MAX_BATCH_SIZE = 1000
#: The metadata key that marks a batch's callback job; its value is ``{"size": n}``.
BATCH_METADATA = dependencies.BATCH_METADATA


class MemberOutcome(enum.StrEnum):
    """How a member ended, as its edge to the callback records it."""

    COMPLETED = "completed"
    #: Failed for good (out of attempts, failed by its handler, or in the DLQ).
    FAILED = "failed"
    CANCELLED = "cancelled"


def check_size(size: int) -> None:
    """An empty batch and one over :data:`MAX_BATCH_SIZE` are refused."""
    if size == 0:
        raise ValidationError("batch", "has no jobs; add at least one before inserting")
    if size > MAX_BATCH_SIZE:
        raise ValidationError(
            "batch",
            f"has {size} jobs; at most {MAX_BATCH_SIZE} are allowed in one batch",
            value=size,
        )


def marker(size: int) -> dict[str, Any]:
    """The callback's metadata entry for a batch of ``size`` jobs."""
    return {"size": size}


def callback_spec(callback: JobSpec, members: Iterable[int]) -> JobSpec:
    """``callback`` as the callback of a batch of the jobs ``members`` (ids, in order,
    repeats counted once): waiting on each through a ``run`` edge, marked with the
    batch's size. Refuses an empty or oversized batch and a callback with ``run_at``."""
    ids = tuple(dict.fromkeys(members))
    check_size(len(ids))
    spec = attrs.evolve(
        callback,
        depends_on=ids,
        on_parent_failure=(str(OnParentFailure.RUN),) * len(ids),
        metadata={**callback.metadata, BATCH_METADATA: marker(len(ids))},
    )
    check_spec(spec)
    return spec


def is_callback(metadata: Mapping[str, Any]) -> bool:
    """Whether a job with ``metadata`` is a batch's callback."""
    return isinstance(metadata.get(BATCH_METADATA), dict)


def size_of(metadata: Mapping[str, Any]) -> int | None:
    """The size of the batch whose callback has ``metadata``; ``None`` for any other job."""
    if not is_callback(metadata):
        return None
    size = metadata[BATCH_METADATA].get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


@attrs.frozen
class BatchCounts:
    """A batch's progress: its size and how many of its jobs completed, failed and were
    cancelled; the rest (``pending``) have not finished. The callback runs when
    ``pending`` is 0 and reads these as ``job.batch``.

    Read through ``client.get_batch`` they also name the batch's callback job
    (``callback_id``, the batch's id) and its state (``callback_state``; a callback in
    the dead-letter queue reads ``failed``; ``None`` once retention removed its row).
    ``job.batch`` leaves both ``None``."""

    size: int
    completed: int
    failed: int
    cancelled: int
    callback_id: int | None = None
    callback_state: JobState | None = None

    @property
    def pending(self) -> int:
        return self.size - self.completed - self.failed - self.cancelled

    @property
    def finished(self) -> bool:
        return self.pending == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "size": self.size,
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "pending": self.pending,
        }


def counts(outcomes: Iterable[MemberOutcome | str | None]) -> BatchCounts:
    """The counts of a batch whose members' edges record ``outcomes`` (``None``: not
    finished yet)."""
    size = completed = failed = cancelled = 0
    for outcome in outcomes:
        size += 1
        if outcome is None:
            continue
        word = MemberOutcome(outcome)
        if word is MemberOutcome.COMPLETED:
            completed += 1
        elif word is MemberOutcome.FAILED:
            failed += 1
        else:
            cancelled += 1
    return BatchCounts(size, completed, failed, cancelled)
