"""Wake-up channel names.

A queue's wake-up channel is ``awa:<queue>``. Postgres channel names are identifiers of at
most 63 bytes: ``LISTEN`` truncates a longer one and ``pg_notify`` refuses it, so the name
is cut to 63 bytes (at a character boundary) on both sides. Two long queue names that share
their first 59 bytes share a channel; a wake-up is only a hint, so that costs a spurious
claim attempt at most.
"""

from __future__ import annotations

#: NAMEDATALEN - 1 in a stock Postgres build.
MAX_CHANNEL_BYTES = 63


def queue_channel(queue: str) -> str:
    """The wake-up channel of ``queue``."""
    name = f"awa:{queue}"
    raw = name.encode()
    if len(raw) <= MAX_CHANNEL_BYTES:
        return name
    return raw[:MAX_CHANNEL_BYTES].decode(errors="ignore")
