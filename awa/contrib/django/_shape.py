"""How a Django task is stored as an Awa job, and how the job reads back as Django's
task result: the kind, the args and metadata shapes, the priority mapping and the
status mapping, each written once (ADR 0036).

This module imports no Django, so the rules are tested without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from awa.domain.states import JobState
from awa.domain.validation import MAX_PRIORITY, MIN_PRIORITY

#: The one Awa kind of every Django task; the task's import path is in its args, so one
#: handler in the worker runs them all and a new task needs no worker change.
KIND: Final = "django.task"

#: Keys of the job's args: the task's import path and the call's arguments.
TASK_KEY: Final = "task"
ARGS_KEY: Final = "args"
KWARGS_KEY: Final = "kwargs"

#: The job's metadata key holding what Django set on the task and Awa does not keep as
#: such: its own priority (-100..100) and ``run_after``, read back into ``TaskResult.task``.
METADATA_KEY: Final = "django"

#: The progress-metadata key where the worker records each failed attempt's exception
#: class path and traceback (Awa's error entries hold the class name only).
ERRORS_KEY: Final = "django_errors"
#: The longest traceback kept per failed attempt, in characters (its end is kept).
MAX_TRACEBACK_CHARS: Final = 8000
#: How many failed attempts' tracebacks are kept (the latest).
MAX_RECORDED_ERRORS: Final = 10

#: Django's priority bounds and default (``django.tasks.base``).
DJANGO_MIN_PRIORITY: Final = -100
DJANGO_MAX_PRIORITY: Final = 100

#: Django priority (higher runs first) to Awa priority (1 runs first): four bands, so
#: Django's default 0 is Awa's default 2.
#:   50..100 -> 1,  0..49 -> 2,  -50..-1 -> 3,  -100..-51 -> 4
_BANDS: Final = ((50, 1), (0, 2), (-50, 3), (DJANGO_MIN_PRIORITY, 4))


def awa_priority(django_priority: int) -> int:
    """The Awa priority (1..4, 1 first) of a Django priority (-100..100, higher first)."""
    if not DJANGO_MIN_PRIORITY <= django_priority <= DJANGO_MAX_PRIORITY:
        raise ValueError(
            f"priority must be between {DJANGO_MIN_PRIORITY} and {DJANGO_MAX_PRIORITY}, "
            f"got {django_priority}"
        )
    for floor, priority in _BANDS:
        if django_priority >= floor:
            assert MIN_PRIORITY <= priority <= MAX_PRIORITY
            return priority
    raise AssertionError("unreachable: the last band starts at the minimum")


#: Django's ``TaskResultStatus`` value of each job state. A job waiting to run (at its
#: time, for a retry, or for its parents) is READY; one in a handler or waiting on an
#: external callback is RUNNING; a cancelled job failed to run, as Django has no
#: cancelled status.
STATUS_OF_STATE: Final[Mapping[JobState, str]] = {
    JobState.Scheduled: "READY",
    JobState.Available: "READY",
    JobState.Retryable: "READY",
    JobState.Running: "RUNNING",
    JobState.WaitingExternal: "RUNNING",
    JobState.Completed: "SUCCESSFUL",
    JobState.Failed: "FAILED",
    JobState.Cancelled: "FAILED",
}


def job_args(task_path: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The args of the job that runs ``task_path(*args, **kwargs)``."""
    return {TASK_KEY: task_path, ARGS_KEY: args, KWARGS_KEY: kwargs}


def task_call(job_args_value: Any) -> tuple[str, list[Any], dict[str, Any]]:
    """The task path, args and kwargs a job's args hold; ``ValueError`` if they are not
    the shape :func:`job_args` writes."""
    if isinstance(job_args_value, Mapping):
        path = job_args_value.get(TASK_KEY)
        args = job_args_value.get(ARGS_KEY, [])
        kwargs = job_args_value.get(KWARGS_KEY, {})
        if isinstance(path, str) and isinstance(args, list) and isinstance(kwargs, dict):
            return path, args, kwargs
    raise ValueError(
        f"the args of a {KIND!r} job must be {{{TASK_KEY!r}: path, {ARGS_KEY!r}: [...], "
        f"{KWARGS_KEY!r}: {{...}}}}, got {job_args_value!r}"
    )


def error_record(attempt: int, class_path: str, traceback: str) -> dict[str, Any]:
    """One failed attempt as the worker records it (the traceback's end kept)."""
    return {
        "attempt": attempt,
        "exception_class_path": class_path,
        "traceback": traceback[-MAX_TRACEBACK_CHARS:],
    }


def recorded_errors(progress: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The failed attempts the worker recorded in a job's progress metadata."""
    metadata = (progress or {}).get("metadata") or {}
    found = metadata.get(ERRORS_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(found, list):
        return []
    return [entry for entry in found if isinstance(entry, dict)]


def with_error(progress: Mapping[str, Any] | None, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded errors with ``record`` added, the latest ones kept."""
    return [*recorded_errors(progress), record][-MAX_RECORDED_ERRORS:]


#: The exception class named for a failure Awa recorded without the task raising it
#: (a rescue after a lost worker, a deadline, a shutdown), and for a cancellation.
FAILED_CLASS_PATH: Final = "awa.JobFailed"
CANCELLED_CLASS_PATH: Final = "awa.JobCancelled"


def task_errors(
    state: JobState, job_errors: list[dict[str, Any]], recorded: list[dict[str, Any]]
) -> list[dict[str, str]]:
    """Django's ``TaskResult.errors`` of a job, oldest first, as
    ``{exception_class_path, traceback}``: one per attempt that failed, with the class
    path and traceback the worker recorded when the task raised, else Awa's error text
    under :data:`FAILED_CLASS_PATH`; a cancelled job that recorded no error gets one
    under :data:`CANCELLED_CLASS_PATH`."""
    by_attempt = {entry.get("attempt"): entry for entry in recorded}
    errors: list[dict[str, str]] = []
    for entry in job_errors:
        mine = by_attempt.pop(entry.get("attempt"), None)
        if mine is not None:
            errors.append(
                {
                    "exception_class_path": str(mine.get("exception_class_path")),
                    "traceback": str(mine.get("traceback", "")),
                }
            )
        else:
            errors.append(
                {"exception_class_path": FAILED_CLASS_PATH, "traceback": str(entry.get("error"))}
            )
    if state is JobState.Cancelled and not errors:
        errors.append(
            {"exception_class_path": CANCELLED_CLASS_PATH, "traceback": "the job was cancelled"}
        )
    return errors


def worker_ids(attempts: int) -> list[str]:
    """``TaskResult.worker_ids``: one entry per attempt made (so Django's ``attempts``
    is Awa's attempt count). Awa's job row does not say which worker ran an attempt, so
    each entry names the attempt."""
    return [f"awa-attempt-{n}" for n in range(1, attempts + 1)]


#: The marker of a Django task's stored result. The result is an envelope holding the
#: return value and what ``TaskResult`` shows of the job, so a result read after queue
#: storage reclaimed the finished job's row (within minutes) still reads in full, for
#: the results' own retention (seven days, ADR 0033).
ENVELOPE_KEY: Final = "django_task_result"
ENVELOPE_VERSION: Final = 1


def envelope(value: Any, **facts: Any) -> dict[str, Any]:
    """The stored result of a Django task that returned ``value``; ``facts`` are the
    job's task path, args, kwargs, queue, Django priority, ``run_after``, timestamps
    (ISO 8601), attempt count and errors, as :func:`envelope_facts` reads them back."""
    return {ENVELOPE_KEY: ENVELOPE_VERSION, "value": value, **facts}


def is_envelope(stored: Any) -> bool:
    return isinstance(stored, Mapping) and stored.get(ENVELOPE_KEY) == ENVELOPE_VERSION


def envelope_value(stored: Any) -> Any:
    """The task's return value in a stored result (``None`` when none is stored)."""
    return stored.get("value") if is_envelope(stored) else None
