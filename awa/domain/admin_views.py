"""Value types of the operator read models: per-kind totals, finalization buckets and the
cheap queue depth the metrics report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain.job import QueueCounts
from awa.domain.states import JobState


@attrs.frozen
class KindCounts:
    """One job kind across the jobs that exist now (an engine's ``kind_counts`` leaves
    DLQ entries out; :func:`listed_kinds` adds them for the operator's list)."""

    kind: str
    job_count: int
    queue_count: int
    completed_last_hour: int


@attrs.frozen
class StateBucket:
    """How many jobs reached terminal ``state`` during the minute starting at ``bucket``."""

    bucket: datetime
    state: JobState
    count: int


@attrs.frozen
class QueueStateBucket:
    """How many jobs of ``queue`` reached ``state`` during the UTC minute starting at
    ``bucket``."""

    bucket: datetime
    queue: str
    state: JobState
    count: int


def first_minute(now: datetime, window: timedelta) -> datetime:
    """Where a per-minute series over the last ``window`` starts: the start of the minute
    that holds ``now - window``, so every bucket in the series is a whole minute."""
    return (now - window).replace(second=0, microsecond=0)


def minute_of(at: datetime) -> datetime:
    """The start of the minute that holds ``at``."""
    return at.replace(second=0, microsecond=0)


def queue_state_buckets(rows: Iterable[Mapping[str, Any]]) -> list[QueueStateBucket]:
    """Buckets from ``{bucket, queue, state, n}`` rows (state by its SQL name), rows of
    the same minute, queue and state summed, ordered by minute, queue, then state name."""
    merged: dict[tuple[datetime, str, JobState], int] = {}
    for row in rows:
        key = (row["bucket"], row["queue"], JobState.parse(row["state"]))
        merged[key] = merged.get(key, 0) + int(row["n"])
    return [
        QueueStateBucket(bucket=b, queue=q, state=s, count=n)
        for (b, q, s), n in sorted(merged.items(), key=lambda i: (i[0][0], i[0][1], str(i[0][2])))
        if n
    ]


#: The states ``queue_depths()`` reports: the jobs still to run or running.
DEPTH_STATES = (
    JobState.Available,
    JobState.Scheduled,
    JobState.Retryable,
    JobState.Running,
    JobState.WaitingExternal,
)


@attrs.frozen
class QueueDepth:
    """A cheap reading of one queue's backlog, for metrics: jobs per state of
    :data:`DEPTH_STATES` and when the oldest available job became due. Engines may
    over-count (see ``StorageEngine.queue_depths``); admin pages use exact counts."""

    queue: str
    counts: Mapping[JobState, int]
    oldest_available_at: datetime | None

    def count(self, state: JobState) -> int:
        return self.counts.get(state, 0)

    def lag_seconds(self, now: datetime) -> float:
        """How long the oldest available job has waited past its run_at at ``now``; 0
        with none waiting."""
        if self.oldest_available_at is None:
            return 0.0
        return max(0.0, (now - self.oldest_available_at).total_seconds())


#: How often the maintenance leader records each queue's depth and lag, and how long the
#: samples are kept (the dashboard draws the last hour).
QUEUE_SAMPLE_INTERVAL = timedelta(minutes=1)
QUEUE_SAMPLES_KEPT = timedelta(hours=24)


@attrs.frozen
class QueueSample:
    """One queue's backlog at ``sampled_at`` as the maintenance leader read it
    (``queue_depths``, so as cheap and as exact as that): jobs per state of
    :data:`DEPTH_STATES` and the lag, how long its oldest available job had waited."""

    sampled_at: datetime
    queue: str
    counts: Mapping[JobState, int]
    lag_seconds: float

    def count(self, state: JobState) -> int:
        return self.counts.get(state, 0)


def samples_from_depths(depths: Iterable[QueueDepth], now: datetime) -> list[QueueSample]:
    """The samples of one reading of ``queue_depths()`` taken at ``now``."""
    return [
        QueueSample(
            sampled_at=now,
            queue=d.queue,
            counts={state: d.count(state) for state in DEPTH_STATES},
            lag_seconds=d.lag_seconds(now),
        )
        for d in depths
    ]


def queue_depths_from(rows: Iterable[Mapping[str, Any]]) -> list[QueueDepth]:
    """Depths from ``{queue, state, n, oldest}`` rows (state by its SQL name; ``oldest``
    set on available rows), every depth state present, ordered by queue name; several
    rows of one queue and state add up."""
    counts: dict[str, dict[JobState, int]] = {}
    oldest: dict[str, datetime] = {}
    for row in rows:
        queue = row["queue"]
        per_state = counts.setdefault(queue, dict.fromkeys(DEPTH_STATES, 0))
        state = JobState.parse(row["state"])
        if state in per_state:
            per_state[state] += int(row["n"] or 0)
        seen = row.get("oldest")
        if seen is not None and (queue not in oldest or seen < oldest[queue]):
            oldest[queue] = seen
    return [
        QueueDepth(
            queue=queue,
            counts=counts[queue],
            oldest_available_at=oldest.get(queue) if counts[queue][JobState.Available] else None,
        )
        for queue in sorted(counts)
    ]


def listed_queues(
    counts: Iterable[QueueCounts], dead_lettered: Mapping[str, int], declared: Iterable[str]
) -> list[QueueCounts]:
    """The queues an operator's list shows, by name, as awa-pg lists them: a
    dead-lettered job counts as ``failed`` (the state it is kept in), and a queue whose
    jobs are all dead-lettered, or that a runtime declared but has no jobs, is listed with
    zero counts rather than left out."""
    by_queue = {c.queue: c for c in counts}
    rows = []
    for queue in sorted(set(by_queue) | set(dead_lettered) | set(declared)):
        row = by_queue.get(queue) or QueueCounts(
            queue=queue, counts={}, paused=False, completed_last_hour=0, oldest_available_at=None
        )
        extra = dead_lettered.get(queue, 0)
        if extra:
            failed = row.count(JobState.Failed) + extra
            row = attrs.evolve(row, counts={**row.counts, JobState.Failed: failed})
        rows.append(row)
    return rows


def listed_kinds(
    counts: Iterable[KindCounts],
    dead_lettered: Iterable[tuple[str, str, int]],
    declared: Iterable[str],
) -> list[KindCounts]:
    """The kinds an operator's list shows, by name, as awa-pg lists them: dead-lettered
    jobs (``(kind, queue, n)`` from the DLQ) count in ``job_count``, and a kind with only
    dead-lettered jobs, or one a runtime declared with no jobs, is listed too. A kind's
    ``queue_count`` is the larger of its jobs' and its DLQ entries' (never overcounted)."""
    by_kind = {k.kind: k for k in counts}
    dlq_jobs: dict[str, int] = {}
    dlq_queues: dict[str, set[str]] = {}
    for kind, queue, n in dead_lettered:
        dlq_jobs[kind] = dlq_jobs.get(kind, 0) + n
        dlq_queues.setdefault(kind, set()).add(queue)
    rows = []
    for kind in sorted(set(by_kind) | set(dlq_jobs) | set(declared)):
        row = by_kind.get(kind) or KindCounts(kind, 0, 0, 0)
        rows.append(
            KindCounts(
                kind=kind,
                job_count=row.job_count + dlq_jobs.get(kind, 0),
                queue_count=max(row.queue_count, len(dlq_queues.get(kind, ()))),
                completed_last_hour=row.completed_last_hour,
            )
        )
    return rows
