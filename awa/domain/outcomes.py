"""Handler outcomes: what a handler's return value or exception asks storage to do."""

from __future__ import annotations

from datetime import timedelta

import attrs

from awa.domain.lifecycle import HANDLER_CANCEL_REASON, HANDLER_RETRY_ERROR


@attrs.frozen
class Complete:
    """The attempt succeeded."""


@attrs.frozen
class RetryAfterOutcome:
    """Retry after ``delay`` (spends an attempt; fails when attempts are exhausted)."""

    delay: timedelta
    error: str = HANDLER_RETRY_ERROR


@attrs.frozen
class RetryWithBackoff:
    """A retryable failure: retry after the backoff delay (spends an attempt)."""

    error: str


@attrs.frozen
class SnoozeOutcome:
    """Come back after ``delay`` without spending an attempt."""

    delay: timedelta


@attrs.frozen
class CancelOutcome:
    reason: str = HANDLER_CANCEL_REASON


@attrs.frozen
class FailOutcome:
    """Fail now, without retrying."""

    error: str


@attrs.frozen
class WaitForCallbackOutcome:
    """Park the attempt in ``waiting_external`` until the callback resolves or times out."""

    callback_id: str


Outcome = (
    Complete
    | RetryAfterOutcome
    | RetryWithBackoff
    | SnoozeOutcome
    | CancelOutcome
    | FailOutcome
    | WaitForCallbackOutcome
)
