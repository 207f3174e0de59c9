"""When a worker runtime's published snapshot still counts as live."""

from __future__ import annotations

from datetime import datetime, timedelta

#: A runtime is live while its snapshot is younger than three snapshot intervals, and
#: never less than this (short intervals would make a brief stall look like a death).
MIN_LIVE_WINDOW = timedelta(seconds=30)


def live_window(snapshot_interval_ms: int) -> timedelta:
    """How long after its last snapshot a runtime still counts as live."""
    return max(timedelta(milliseconds=3 * snapshot_interval_ms), MIN_LIVE_WINDOW)


def is_live(last_seen_at: datetime, snapshot_interval_ms: int, now: datetime) -> bool:
    """Whether a runtime last seen at ``last_seen_at`` is live at ``now``."""
    return now - last_seen_at < live_window(snapshot_interval_ms)
