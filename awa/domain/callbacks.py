"""External callbacks: the resolution actions and what each does to the waiting job.

Engines look the attempt up by callback id under their own locking and apply these
changes; every action ends the callback (its id stops resolving), so a second resolve, a
late heartbeat or a token from an attempt that was rescued or retried meanwhile raises
:class:`CallbackNotFound`.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from awa.domain.errors import CallbackNotFound, ValidationError
from awa.domain.job import JobRecord
from awa.domain.states import JobState

#: What ``resolve_callback`` of the storage port accepts.
CALLBACK_ACTIONS = frozenset({"complete", "fail", "retry", "resume"})
#: Metadata key holding the payload of the last resume (read by ``wait_for_callback``).
CALLBACK_RESULT_KEY = "_awa_callback_result"
#: Error recorded when ``fail_external`` gives no message.
DEFAULT_FAIL_ERROR = "callback failed"
#: DLQ reason of a job failed through its callback.
CALLBACK_FAILED_REASON = "callback_failed"

#: The callback columns of a job whose callback has ended.
CLEARED: dict[str, Any] = {"callback_id": None, "callback_timeout_at": None}


def check_action(action: str) -> None:
    if action not in CALLBACK_ACTIONS:
        raise ValidationError("action", f"must be one of {sorted(CALLBACK_ACTIONS)}", value=action)


def callback_not_found(callback_id: str) -> CallbackNotFound:
    return CallbackNotFound(f"callback not found: {callback_id}")


def retry_changes(now: datetime) -> dict[str, Any]:
    """``retry_external`` (and an operator retry of a waiting job): the job is available
    again now with a fresh attempt budget, no error recorded, the callback ended."""
    return {"state": JobState.Available, "run_at": now, "attempt": 0, **CLEARED}


def resume_changes(job: JobRecord, payload: Any, now: datetime) -> dict[str, Any]:
    """``resume_external``: the handler's ``wait_for_callback`` returns ``payload``; the
    attempt runs on (a later wait registers a new callback)."""
    return {
        "state": JobState.Running,
        "heartbeat_at": now,
        "metadata": {**job.metadata, CALLBACK_RESULT_KEY: payload},
        **CLEARED,
    }


def validate_timeout(value: Any, operation: str) -> float:
    """A callback timeout in seconds (``timeout_seconds`` of ``operation``): a finite
    number, not negative."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float):
        raise TypeError(f"timeout_seconds: must be real number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValidationError(
            operation,
            f"timeout_seconds must be a finite, non-negative number, got {value!r}",
            value=value,
        )
    return float(value)
