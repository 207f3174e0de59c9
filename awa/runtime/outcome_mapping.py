"""Turn a handler's return value or exception into a storage outcome."""

from __future__ import annotations

import traceback
from datetime import datetime, timedelta
from typing import Any

from awa.domain.errors import TerminalError, ValidationError
from awa.domain.handler_results import Cancel, RetryAfter, Snooze, WaitForCallback
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
from awa.domain.validation import storable_text

TRACEBACK_LINES = 10


def outcome_for_result(value: Any, now: datetime) -> Outcome:
    """``None`` and any unrecognised value complete the attempt; ``now`` turns a
    ``Snooze(until=...)`` into its delay."""
    if isinstance(value, RetryAfter):
        return RetryAfterOutcome(delay=timedelta(seconds=value.seconds))
    if isinstance(value, Snooze):
        try:
            return SnoozeOutcome(delay=timedelta(seconds=value.delay_at(now)))
        except ValidationError as exc:
            # An `until` more than 100 years out: the attempt records why, as a handler
            # error would be.
            return RetryWithBackoff(error=describe_exception(exc, with_traceback=False))
    if isinstance(value, Cancel):
        return CancelOutcome(reason=storable_text(str(value.reason)))
    if isinstance(value, WaitForCallback):
        return WaitForCallbackOutcome(callback_id=value.callback_id)
    return Complete()


def describe_exception(exc: BaseException, *, with_traceback: bool = True) -> str:
    """``"{Type}: {message}"`` followed by the last lines of the traceback."""
    try:
        message = str(exc)
    except Exception as broken:  # a __str__ that raises must not lose the failure
        message = f"<message unavailable: {type(broken).__name__}>"
    head = f"{type(exc).__name__}: {message}"
    if not with_traceback or exc.__traceback__ is None:
        return storable_text(head)
    lines = "".join(traceback.format_tb(exc.__traceback__)).rstrip("\n").splitlines()
    tail = lines[-TRACEBACK_LINES:]
    # NUL or a lone surrogate in the message would make the error unstorable, leaving the
    # job running until the heartbeat rescue with only "heartbeat stale" to show.
    return storable_text(head + "\n" + "\n".join(tail) if tail else head)


def outcome_for_exception(exc: BaseException) -> Outcome:
    """A :class:`TerminalError` fails the job; anything else is retried with backoff."""
    if isinstance(exc, TerminalError):
        return FailOutcome(error=describe_exception(exc, with_traceback=False))
    return RetryWithBackoff(error=describe_exception(exc))
