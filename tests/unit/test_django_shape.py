"""The rules of the Django task backend that need no Django (``awa.contrib.django._shape``,
ADR 0036): the priority bands, the status of each job state, the args shape and how a
job's errors read back as Django's."""

from __future__ import annotations

import pytest

from awa.contrib.django import _shape
from awa.domain.states import JobState
from awa.domain.validation import MAX_PRIORITY, MIN_PRIORITY


@pytest.mark.parametrize(
    ("django", "awa"),
    [(100, 1), (50, 1), (49, 2), (0, 2), (-1, 3), (-50, 3), (-51, 4), (-100, 4)],
)
def test_django_priorities_fall_into_four_bands(django: int, awa: int) -> None:
    assert _shape.awa_priority(django) == awa


def test_the_priority_mapping_keeps_the_order_and_the_defaults() -> None:
    mapped = [_shape.awa_priority(p) for p in range(-100, 101)]
    # Higher in Django runs first; 1 runs first in Awa: never inverted.
    assert mapped == sorted(mapped, reverse=True)
    assert set(mapped) == set(range(MIN_PRIORITY, MAX_PRIORITY + 1))
    assert _shape.awa_priority(0) == 2  # Django's default is Awa's default


@pytest.mark.parametrize("bad", [101, -101])
def test_a_priority_out_of_django_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="between -100 and 100"):
        _shape.awa_priority(bad)


def test_every_job_state_has_a_django_status() -> None:
    assert set(_shape.STATUS_OF_STATE) == set(JobState)
    assert {state for state, s in _shape.STATUS_OF_STATE.items() if s == "RUNNING"} == {
        JobState.Running,
        JobState.WaitingExternal,
    }
    assert _shape.STATUS_OF_STATE[JobState.Cancelled] == "FAILED"
    assert _shape.STATUS_OF_STATE[JobState.Retryable] == "READY"


def test_job_args_round_trip_and_a_foreign_shape_is_refused() -> None:
    args = _shape.job_args("app.tasks.add", [1], {"b": 2})
    assert _shape.task_call(args) == ("app.tasks.add", [1], {"b": 2})
    bad: object
    for bad in ({"task": 3}, {"args": []}, [1], {"task": "x", "args": {}}):
        with pytest.raises(ValueError, match="must be"):
            _shape.task_call(bad)


def test_errors_pair_the_recorded_tracebacks_with_the_failed_attempts() -> None:
    job_errors = [
        {"error": "worker lost", "attempt": 1},
        {"error": "TerminalError: raised Boom", "attempt": 2},
    ]
    recorded = [_shape.error_record(2, "app.errors.Boom", "Traceback...\nBoom: no")]
    errors = _shape.task_errors(JobState.Failed, job_errors, recorded)
    assert errors == [
        {"exception_class_path": _shape.FAILED_CLASS_PATH, "traceback": "worker lost"},
        {"exception_class_path": "app.errors.Boom", "traceback": "Traceback...\nBoom: no"},
    ]
    assert _shape.task_errors(JobState.Cancelled, [], []) == [
        {"exception_class_path": _shape.CANCELLED_CLASS_PATH, "traceback": "the job was cancelled"}
    ]
    assert _shape.task_errors(JobState.Completed, [], []) == []


def test_recorded_errors_keep_the_latest_and_the_end_of_long_tracebacks() -> None:
    progress = None
    for attempt in range(1, _shape.MAX_RECORDED_ERRORS + 3):
        entry = _shape.error_record(attempt, "E", "x" * (_shape.MAX_TRACEBACK_CHARS + 5) + "end")
        progress = {"metadata": {_shape.ERRORS_KEY: _shape.with_error(progress, entry)}}
    kept = _shape.recorded_errors(progress)
    assert [e["attempt"] for e in kept] == list(range(3, _shape.MAX_RECORDED_ERRORS + 3))
    assert len(kept[0]["traceback"]) == _shape.MAX_TRACEBACK_CHARS
    assert kept[0]["traceback"].endswith("end")
    assert _shape.recorded_errors({"metadata": {_shape.ERRORS_KEY: "junk"}}) == []


def test_worker_ids_count_the_attempts() -> None:
    assert _shape.worker_ids(0) == []
    assert len(_shape.worker_ids(3)) == 3


def test_a_stored_result_is_an_envelope_around_the_value() -> None:
    stored = _shape.envelope({"n": 1}, task="app.tasks.t", args=[], kwargs={})
    assert _shape.is_envelope(stored)
    assert _shape.envelope_value(stored) == {"n": 1}
    # A plain stored value (not written by the Django worker) carries no task value.
    assert not _shape.is_envelope({"value": 3})
    assert _shape.envelope_value({"value": 3}) is None
    assert _shape.envelope_value(None) is None
