"""Values a handler returns to tell the runtime what to do with its attempt.

``None`` (or any other value) means the attempt completed. These classes are re-exported
as ``awa.RetryAfter``, ``awa.Snooze``, ``awa.Cancel``, ``awa.WaitForCallback`` and
``awa.CallbackToken``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.lifecycle import HANDLER_CANCEL_REASON
from awa.domain.validation import validate_delay


def _seconds(value: Any) -> float:
    return validate_delay(value)


@attrs.frozen
class CallbackToken:
    """The id of an external callback registered by a running attempt."""

    id: str


@attrs.frozen
class RetryAfter:
    """Retry the job after ``seconds`` (spends an attempt). ``seconds`` is a finite number
    from 0 to 100 years; anything else raises ``TypeError`` / ``ValueError`` here, in the
    handler, so that error is what the attempt records."""

    seconds: float = attrs.field(converter=_seconds)


def _until(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationTypeError(
            "until", f"must be a datetime, got {type(value).__name__}", value=value
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("until", "must be timezone-aware (an API's reset time in UTC)")
    return value


@attrs.frozen
class Snooze:
    """Run the job again after ``seconds``, or at ``until`` (an aware datetime, such as
    an API's rate-limit reset time), without spending an attempt (``seconds`` as for
    :class:`RetryAfter`; an ``until`` already past runs it again at once)."""

    seconds: float = attrs.field(default=0.0, converter=_seconds)
    until: datetime | None = attrs.field(default=None, kw_only=True, converter=_until)

    def __attrs_post_init__(self) -> None:
        if self.until is not None and self.seconds:
            raise ValidationError("until", "give either seconds or until, not both")

    def delay_at(self, now: datetime) -> float:
        """The snooze in seconds from ``now``."""
        if self.until is None:
            return self.seconds
        return validate_delay(max(0.0, (self.until - now).total_seconds()), "until")


@attrs.frozen
class Cancel:
    """Cancel the job; it will not be retried."""

    reason: str = HANDLER_CANCEL_REASON


@attrs.frozen
class WaitForCallback:
    """Park the attempt until the registered callback is resolved (or times out)."""

    token: CallbackToken

    @property
    def callback_id(self) -> str:
        return self.token.id
