"""Value types of the operator read models: per-kind totals and finalization buckets."""

from __future__ import annotations

from datetime import datetime

import attrs

from awa.domain.states import JobState


@attrs.frozen
class KindCounts:
    """One job kind across the jobs that exist now (DLQ entries are not jobs)."""

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
