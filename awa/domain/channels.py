"""Notification channels: queue wake-ups and cancel notices.

A queue's wake-up channel is ``awa:<queue>``. Postgres channel names are identifiers of at
most 63 bytes: ``LISTEN`` truncates a longer one and ``pg_notify`` refuses it, so the name
is cut to 63 bytes (at a character boundary) on both sides. Two long queue names that share
their first 59 bytes share a channel; a wake-up is only a hint, so that costs a spurious
claim attempt at most.

A worker running an attempt that an operator cancelled is told on ``awa:cancel``
(:func:`cancel_notification`).
"""

from __future__ import annotations

import json

#: NAMEDATALEN - 1 in a stock Postgres build.
MAX_CHANNEL_BYTES = 63


def queue_channel(queue: str) -> str:
    """The wake-up channel of ``queue``."""
    name = f"awa:{queue}"
    raw = name.encode()
    if len(raw) <= MAX_CHANNEL_BYTES:
        return name
    return raw[:MAX_CHANNEL_BYTES].decode(errors="ignore")


#: The channel on which a running attempt's worker hears that the attempt was cancelled.
CANCEL_CHANNEL = "awa:cancel"


def cancel_notification(job_id: int, run_lease: int) -> tuple[str, str]:
    """``(channel, payload)`` telling the worker of attempt ``run_lease`` of ``job_id`` that
    it was cancelled. The payload is the text Postgres gives
    ``json_build_object('job_id', id, 'run_lease', run_lease)::text``, the form the schema's
    SQL functions send, so a listener sees one form whichever path cancelled the job."""
    payload = json.dumps({"job_id": job_id, "run_lease": run_lease}, separators=(", ", " : "))
    return CANCEL_CHANNEL, payload
