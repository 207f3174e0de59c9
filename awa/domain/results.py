"""Stored results: what a task that opts in (``store_result=True``) leaves for the code
that waits on its job (``client.wait_for``).

A result is the handler's return value as JSON text, kept in a store of its own (not in
the job row), for :data:`RESULT_RETENTION` after it was stored, whatever happens to the
job row meanwhile (queue storage reclaims finished history on its own schedule). It is
stored before the completion is recorded and becomes an answer once the job is
``completed``; a waiter is told on the job's result channel (:func:`result_channel`)
after the job finished, and polls every :data:`WAIT_POLL_SECONDS` as well.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain.errors import AwaError, ValidationError
from awa.domain.states import JobState

#: The largest result stored, in bytes of its JSON text (UTF-8). A larger one fails the
#: attempt with a message naming both sizes (it would not fit on a retry either).
MAX_RESULT_BYTES = 1024 * 1024

#: How long a stored result is kept after it was stored; the maintenance leader deletes
#: older ones. Independent of the job row's own retention.
RESULT_RETENTION = timedelta(days=7)

#: How often a waiter re-reads the job when no notification came (the only way it learns
#: of an operator's cancel, and its only way behind a transaction-mode pooler).
WAIT_POLL_SECONDS = 1.0

#: The prefix of a job's result channel (``awa:result:<job id>``, at most 32 bytes): what
#: a waiter's subscription reports when its job finished.
RESULT_CHANNEL_PREFIX = "awa:result:"

#: The prefix of a job's completed channel (``awa:done:<job id>``): what a waiter's
#: subscription reports, beside the result channel, when the announcement says the job's
#: completion is committed, so the waiter answers with the stored result without reading
#: the job again.
COMPLETED_CHANNEL_PREFIX = "awa:done:"

#: The one Postgres channel on which finishes are announced, the job id as payload
#: (followed by `` completed`` for a committed completion): a process listens once for
#: all its waiters and wakes only the job's own.
RESULTS_CHANNEL = "awa:results"

#: The word after the job id in a completion's announcement on :data:`RESULTS_CHANNEL`.
COMPLETED_PAYLOAD = "completed"

#: The states that end a job for a waiter: it answers with the result or the failure.
FINISHED_STATES = frozenset({JobState.Completed, JobState.Failed, JobState.Cancelled})


def result_channel(job_id: int) -> str:
    """The channel on which waiters on ``job_id`` are told it finished."""
    return f"{RESULT_CHANNEL_PREFIX}{job_id}"


def completed_channel(job_id: int) -> str:
    """The channel on which waiters on ``job_id`` are told it completed (committed)."""
    return f"{COMPLETED_CHANNEL_PREFIX}{job_id}"


def announced_channels(job_id: int, *, completed: bool) -> list[str]:
    """What a finish announcement of ``job_id`` fires for its waiters."""
    channels = [result_channel(job_id)]
    if completed:
        channels.append(completed_channel(job_id))
    return channels


@attrs.frozen
class StoredResult:
    """A job's stored result: its JSON text and when it was stored and expires."""

    job_id: int
    json_text: str
    stored_at: datetime
    expires_at: datetime
    #: The kind of the job that stored it, when recorded.
    kind: str | None = None

    @property
    def value(self) -> Any:
        """The stored JSON value."""
        return json.loads(self.json_text)


def encode_result(value: Any) -> str:
    """The JSON text of a handler's (JSON-shaped) return value, refused with
    ``ValidationError`` when it is not JSON or larger than :data:`MAX_RESULT_BYTES`."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError("result", f"is not storable as JSON: {exc}") from None
    size = len(text.encode())
    if size > MAX_RESULT_BYTES:
        raise ValidationError(
            "result",
            f"is {size} bytes of JSON, over the limit of {MAX_RESULT_BYTES} bytes; "
            "store large outputs elsewhere and return a reference to them",
        )
    return text


class JobFailed(AwaError):
    """The job waited on failed (``where`` is ``"failed"`` or ``"dead-letter queue"``)."""

    def __init__(self, job_id: int, error: str | None, *, where: str = "failed") -> None:
        self.job_id = job_id
        self.error = error
        self.where = where
        detail = f": {error}" if error else ""
        what = "failed" if where == "failed" else f"failed (in the {where})"
        super().__init__(f"job {job_id} {what}{detail}")


class JobCancelled(AwaError):
    """The job waited on was cancelled (``reason``: its last error entry, if any; a
    cancel itself records none)."""

    def __init__(self, job_id: int, reason: str | None) -> None:
        self.job_id = job_id
        self.reason = reason
        detail = f": {reason}" if reason else ""
        super().__init__(f"job {job_id} cancelled{detail}")
