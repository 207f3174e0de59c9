"""One log record per job outcome, under the ``awa.job`` logger.

Levels: a completion is DEBUG; a retry, snooze, handler cancel, release at shutdown or
an attempt lost to a rescue is WARNING or INFO; a terminal failure, an exhausted retry
and an unknown kind are ERROR with the exception (type, message and traceback) attached.

Every record carries the job's fields as attributes (``extra``), named by the ``FIELD_*``
constants, so a structured formatter can emit them as keys; the message repeats them for
people reading plain text. Nothing here configures logging: that is the CLI's job.
"""

from __future__ import annotations

import logging
from typing import Any

from awa.domain.job import JobRecord
from awa.domain.kind_policies import KindPolicies
from awa.domain.lifecycle import attempts_exhausted
from awa.domain.outcomes import (
    CancelOutcome,
    Complete,
    FailOutcome,
    Outcome,
    RetryAfterOutcome,
    RetryWithBackoff,
    SnoozeOutcome,
    WaitForCallbackOutcome,
)
from awa.domain.policies import Backoff, RetryPolicy

log = logging.getLogger("awa.job")

FIELD_ID = "job_id"
FIELD_KIND = "kind"
FIELD_QUEUE = "queue"
FIELD_ATTEMPT = "attempt"
FIELD_MAX_ATTEMPTS = "max_attempts"
FIELD_DURATION_MS = "duration_ms"
FIELD_OUTCOME = "outcome"
FIELD_ERROR = "error"
#: Record attributes a structured formatter should copy into its output.
JOB_FIELDS = (
    FIELD_ID,
    FIELD_KIND,
    FIELD_QUEUE,
    FIELD_ATTEMPT,
    FIELD_MAX_ATTEMPTS,
    FIELD_DURATION_MS,
    FIELD_OUTCOME,
    FIELD_ERROR,
)

# Outcome names as they appear in the ``outcome`` field.
COMPLETED = "completed"
RETRIED = "retried"
SNOOZED = "snoozed"
CANCELLED = "cancelled"
WAITING_EXTERNAL = "waiting_external"
FAILED = "failed"
EXHAUSTED = "exhausted"
UNKNOWN_KIND = "unknown_kind"
DLQ_MOVED = "dlq_moved"
RELEASED = "released"
LOST = "lost"

#: The outcomes that end a job as failed: terminally, on its last attempt, or for want of
#: a handler. Where the queue has the DLQ enabled, the engine moves such a job into it.
TERMINAL_FAILURES = frozenset({FAILED, EXHAUSTED, UNKNOWN_KIND})


def _retry(policies: KindPolicies | None, record: JobRecord) -> RetryPolicy | None:
    return None if policies is None else policies.retry_for(record.kind)


def outcome_name(
    record: JobRecord,
    outcome: Outcome | None,
    *,
    unknown_kind: bool,
    policies: KindPolicies | None = None,
) -> str:
    """The ``outcome`` field for an attempt that ended with ``outcome`` (``None``: the
    attempt was no longer this worker's); ``policies``: the per-kind policies the
    lifecycle applied (a kind's retry budget instead of the job's)."""
    match outcome:
        case None:
            return LOST
        case Complete():
            return COMPLETED
        case RetryWithBackoff() | RetryAfterOutcome():
            # the kind's retry policy is read only here: most attempts complete
            retry = _retry(policies, record)
            budget = record.max_attempts if retry is None else retry.budget(record.max_attempts)
            return EXHAUSTED if attempts_exhausted(record.attempt, budget) else RETRIED
        case SnoozeOutcome():
            return SNOOZED
        case CancelOutcome():
            return CANCELLED
        case WaitForCallbackOutcome():
            return WAITING_EXTERNAL
        case FailOutcome():
            return UNKNOWN_KIND if unknown_kind else FAILED
    return RELEASED


def log_outcome(
    record: JobRecord,
    queue: str,
    outcome: Outcome | None,
    name: str,
    duration: float,
    failure: BaseException | None,
    *,
    policies: KindPolicies | None = None,
) -> None:
    """Log one attempt's outcome (``name`` from :func:`outcome_name`; ``policies``: the
    per-kind policies, whose budget and delays for the job's kind the line states)."""
    level = _LEVELS[name]
    if not log.isEnabledFor(level):
        return
    retry = _retry(policies, record)
    error = _error_text(outcome)
    budget = record.max_attempts if retry is None else retry.budget(record.max_attempts)
    extra: dict[str, Any] = {
        FIELD_ID: record.id,
        FIELD_KIND: record.kind,
        FIELD_QUEUE: queue,
        FIELD_ATTEMPT: record.attempt,
        FIELD_MAX_ATTEMPTS: budget,
        FIELD_DURATION_MS: round(duration * 1000.0, 3),
        FIELD_OUTCOME: name,
    }
    if error is not None:
        extra[FIELD_ERROR] = error
    # The handler's own run time goes in brackets, apart from any delay the outcome
    # names ("will be retried in ..."), so neither reads as the other.
    head = (
        f"job {record.id} {record.kind} (queue {queue}, attempt "
        f"{record.attempt}/{budget}) {_describe(name, outcome, record, retry)} "
        f"[ran {duration * 1000.0:.1f} ms]"
    )
    if error is not None:
        head += f": {error}"
    hint = _HINTS.get(name)
    if hint is not None:
        head += f" ({hint})"
    exc_info = None
    if failure is not None and level >= logging.ERROR:
        exc_info = (type(failure), failure, failure.__traceback__)
    log.log(level, "%s", head, extra=extra, exc_info=exc_info)


def log_dlq_moved(record: JobRecord, queue: str, reason: str) -> None:
    """The job that just failed went into the dead-letter queue (WARNING): where it is and
    the command that retries it from there (``awa job retry`` does not see it)."""
    log.warning(
        "job %s %s (queue %s) moved to the dead-letter queue (reason %s); retry it with "
        "`awa dlq retry %s` once the cause is fixed",
        record.id,
        record.kind,
        queue,
        reason,
        record.id,
        extra={
            FIELD_ID: record.id,
            FIELD_KIND: record.kind,
            FIELD_QUEUE: queue,
            FIELD_OUTCOME: DLQ_MOVED,
        },
    )


def _error_text(outcome: Outcome | None) -> str | None:
    """The first line of the recorded error: the traceback goes to ``exc_info``."""
    match outcome:
        case RetryWithBackoff(error=error) | FailOutcome(error=error):
            return error.split("\n", 1)[0]
        case RetryAfterOutcome(error=error) if error:
            return error.split("\n", 1)[0]
        case CancelOutcome(reason=reason):
            return reason
    return None


def _describe(
    name: str, outcome: Outcome | None, record: JobRecord, retry: RetryPolicy | None
) -> str:
    match outcome:
        case RetryAfterOutcome(delay=delay) if name == RETRIED:
            return f"asked to be retried in {_seconds(delay.total_seconds())}"
        case RetryWithBackoff() if name == RETRIED:
            # The engine draws the jitter; the log states the range it draws from.
            if retry is None:
                low, high = _BACKOFF.bounds(record.attempt)
            else:
                low, high = retry.delay(record.attempt, 0.0), retry.delay(record.attempt, 1.0)
            return (
                f"failed and will be retried in {_seconds(low.total_seconds())} to "
                f"{_seconds(high.total_seconds())} (backoff)"
            )
        case SnoozeOutcome(delay=delay):
            return f"snoozed for {_seconds(delay.total_seconds())}"
        case WaitForCallbackOutcome(callback_id=callback_id):
            return f"is waiting for callback {callback_id}"
    return _DESCRIPTIONS[name]


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


#: The backoff the engines apply to a retryable failure (``lifecycle.retry``'s default).
_BACKOFF = Backoff()

_DESCRIPTIONS = {
    COMPLETED: "completed",
    RETRIED: "failed and will be retried",
    CANCELLED: "was cancelled by its handler",
    FAILED: "failed terminally",
    EXHAUSTED: "failed on its last attempt",
    UNKNOWN_KIND: "failed",
    RELEASED: "was released unfinished at shutdown",
    LOST: "was no longer held by this worker (rescued, cancelled or finished elsewhere)",
}

_HINTS = {
    UNKNOWN_KIND: "no handler is registered for this kind in this worker: register one "
    "with @client.task, or check the kind the producer used",
    EXHAUSTED: "retry it with `awa job retry` once the cause is fixed (`awa dlq retry` if "
    "its queue moves failed jobs to the dead-letter queue)",
}

_LEVELS = {
    COMPLETED: logging.DEBUG,
    WAITING_EXTERNAL: logging.DEBUG,
    RETRIED: logging.WARNING,
    SNOOZED: logging.INFO,
    CANCELLED: logging.INFO,
    RELEASED: logging.INFO,
    LOST: logging.WARNING,
    FAILED: logging.ERROR,
    EXHAUSTED: logging.ERROR,
    UNKNOWN_KIND: logging.ERROR,
}
