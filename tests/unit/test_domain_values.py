"""Job value types, outcomes and the error hierarchy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from awa.domain import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    IllegalTransition,
    JobRecord,
    JobSpec,
    JobState,
    QueueCounts,
    RunLease,
    SchemaNotMigrated,
    SerializationError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
    error_entry,
)
from awa.domain.outcomes import RetryAfterOutcome, SnoozeOutcome
from awa.domain.states import DEFAULT_UNIQUE_STATES

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_job_spec_defaults() -> None:
    spec = JobSpec(kind="k")
    assert (spec.queue, spec.priority, spec.max_attempts) == ("default", 2, 25)
    assert spec.args == {}
    assert spec.metadata == {}
    assert spec.tags == ()
    assert spec.run_at is None
    assert spec.effective_unique_states == DEFAULT_UNIQUE_STATES
    assert JobSpec(kind="k", unique_states=0b11).effective_unique_states == 0b11


def test_job_spec_converts_tags_and_copies_metadata() -> None:
    metadata = {"a": 1}
    spec = JobSpec(kind="k", tags=["x", "y"], metadata=metadata)
    assert spec.tags == ("x", "y")
    metadata["b"] = 2
    assert spec.metadata == {"a": 1}


def test_job_spec_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        JobSpec(kind="k").priority = 1  # type: ignore[misc]


def test_run_lease_orders_by_job_then_lease() -> None:
    assert RunLease(1, 5) < RunLease(2, 0)
    assert RunLease(1, 1) < RunLease(1, 2)
    assert RunLease(3, 4) == RunLease(3, 4)


def test_job_record_lease() -> None:
    job = JobRecord(
        id=7,
        kind="k",
        queue="q",
        args={},
        state=JobState.Running,
        priority=2,
        attempt=1,
        max_attempts=25,
        run_at=T0,
        created_at=T0,
        run_lease=3,
    )
    assert job.lease == RunLease(7, 3)


def test_queue_counts() -> None:
    counts = QueueCounts(
        queue="q",
        counts={JobState.Scheduled: 1, JobState.Available: 2, JobState.Retryable: 4},
        paused=False,
        completed_last_hour=9,
        oldest_available_at=T0,
    )
    assert counts.count(JobState.Running) == 0
    assert counts.total_queued == 7
    assert counts.lag(T0 + timedelta(seconds=90)) == timedelta(seconds=90)
    assert counts.lag(T0 - timedelta(seconds=5)) == timedelta(0)
    assert attrs.evolve(counts, oldest_available_at=None).lag(T0) is None


def test_error_entry_shape() -> None:
    assert error_entry("boom", attempt=2, at=T0) == {
        "error": "boom",
        "attempt": 2,
        "at": "2030-01-01T00:00:00+00:00",
    }
    assert error_entry("boom", attempt=2, at=T0, terminal=True)["terminal"] is True


def test_outcomes_carry_their_data() -> None:
    assert RetryAfterOutcome(timedelta(seconds=3)).error == "retry requested by handler"
    assert SnoozeOutcome(timedelta(seconds=3)).delay == timedelta(seconds=3)


@pytest.mark.parametrize(
    "error",
    [
        UniqueConflict(),
        SchemaNotMigrated("x"),
        UnknownJobKind("k"),
        SerializationError("x"),
        ValidationError("f", "bad"),
        TerminalError("x"),
        DatabaseError("x"),
        CallbackNotFound("x"),
        IllegalTransition(old="a", new="b"),
    ],
)
def test_every_error_is_an_awa_error(error: Exception) -> None:
    assert isinstance(error, AwaError)


def test_errors_carry_data() -> None:
    assert UniqueConflict(job_id=4).job_id == 4
    assert UnknownJobKind("resize").kind == "resize"
    assert str(UnknownJobKind("resize")) == "unknown job kind: resize"
    err = ValidationError("priority", "too big", value=9)
    assert (err.field, err.value, str(err)) == ("priority", 9, "priority: too big")
