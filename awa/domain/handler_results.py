"""Values a handler returns to tell the runtime what to do with its attempt.

``None`` (or any other value) means the attempt completed. These classes are re-exported
as ``awa.RetryAfter``, ``awa.Snooze``, ``awa.Cancel``, ``awa.WaitForCallback`` and
``awa.CallbackToken``.
"""

from __future__ import annotations

from typing import Any

import attrs

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


@attrs.frozen
class Snooze:
    """Run the job again after ``seconds`` without spending an attempt (``seconds`` as
    for :class:`RetryAfter`)."""

    seconds: float = attrs.field(converter=_seconds)


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
