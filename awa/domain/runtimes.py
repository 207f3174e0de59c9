"""When a worker runtime's published snapshot still counts as live."""

from __future__ import annotations

from datetime import datetime, timedelta

#: A runtime is live while its snapshot is younger than three snapshot intervals, and
#: never less than this (short intervals would make a brief stall look like a death).
MIN_LIVE_WINDOW = timedelta(seconds=30)


def live_window(snapshot_interval_ms: int) -> timedelta:
    """How long after its last snapshot a runtime still counts as live."""
    return max(timedelta(milliseconds=3 * snapshot_interval_ms), MIN_LIVE_WINDOW)


def is_live(
    last_seen_at: datetime, snapshot_interval_ms: int, now: datetime, *, shutting_down: bool
) -> bool:
    """Whether a runtime last seen at ``last_seen_at`` is live at ``now``: its snapshot
    is younger than :func:`live_window` and it has not announced its shutdown. A runtime
    shutting down claims nothing more and is gone within its shutdown timeout, so its
    configuration no longer counts (limits in force, served queues, the storage
    transition's checks); a caller that asks whether it is still running passes
    ``shutting_down=False``. The same rule as SQL ``awa.runtime_is_live`` (a test holds
    the two equal)."""
    return not shutting_down and now - last_seen_at < live_window(snapshot_interval_ms)
