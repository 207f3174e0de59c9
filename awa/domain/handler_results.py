"""Values a handler returns to tell the runtime what to do with its attempt.

``None`` (or any other value) means the attempt completed. These classes are re-exported
as ``awa.RetryAfter``, ``awa.Snooze``, ``awa.Cancel``, ``awa.WaitForCallback`` and
``awa.CallbackToken``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"seconds must be a number, got {type(value).__name__}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise ValueError(f"seconds must be a finite number >= 0, got {value!r}")
    return seconds


@attrs.frozen
class CallbackToken:
    """The id of an external callback registered by a running attempt."""

    id: str


@attrs.frozen
class RetryAfter:
    """Retry the job after ``seconds`` (spends an attempt)."""

    seconds: float = attrs.field(converter=_seconds)


@attrs.frozen
class Snooze:
    """Run the job again after ``seconds`` without spending an attempt."""

    seconds: float = attrs.field(converter=_seconds)


@attrs.frozen
class Cancel:
    """Cancel the job; it will not be retried."""

    reason: str = "cancelled by handler"


@attrs.frozen
class WaitForCallback:
    """Park the attempt until the registered callback is resolved (or times out)."""

    token: CallbackToken

    @property
    def callback_id(self) -> str:
        return self.token.id
