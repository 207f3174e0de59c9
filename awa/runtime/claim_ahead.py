"""When a dispatcher sends a second claim before its first one is back (ADR 0037).

A job's notification reaches a worker half a round trip after the job committed, and the
claim it wakes costs a whole round trip more, so a loop driven by notifications starts a
job one round trip after its producer heard the commit, however fast the database is.
While jobs arrive faster than one per claim round trip, claims that reach the server
more often shorten that wait: a claim sent half a round trip after the one in flight
reaches the server half a round trip later, and takes whatever committed in between.

:class:`ClaimPacer` decides, from the claims a dispatcher completed, whether that holds
and how long after a claim was sent the one ahead goes. Pure bookkeeping: the dispatcher
owns the loop, the permits and the clock.
"""

from __future__ import annotations

import attrs

#: A claim that brought back at least this many jobs, yet fewer than it asked for, says
#: jobs arrive faster than one per claim round trip: the queue is busy but not backlogged.
AHEAD_MIN_JOBS = 2
#: No claim goes ahead on a round trip shorter than this (seconds): on a local link the
#: notification-driven claim is already within a millisecond, and a second claim would
#: only double the server's claim work.
AHEAD_MIN_ROUND_TRIP = 0.002
#: Weight of the newest claim in the round-trip estimate.
_SMOOTHING = 0.25


@attrs.define
class ClaimPacer:
    """Tracks a dispatcher's claim round trip and whether claims should go ahead."""

    #: Smoothed round trip of a completed claim, seconds; None before the first one.
    round_trip: float | None = None
    #: Whether the last completed claim found the queue busy but not backlogged.
    busy: bool = False

    def completed(self, seconds: float, asked: int, got: int) -> None:
        """A claim of ``asked`` jobs came back with ``got`` after ``seconds``."""
        if self.round_trip is None:
            self.round_trip = seconds
        else:
            self.round_trip += _SMOOTHING * (seconds - self.round_trip)
        self.busy = AHEAD_MIN_JOBS <= got < asked

    def failed(self) -> None:
        """A claim failed: no claim goes ahead until one succeeds again."""
        self.busy = False

    def ahead_after(self) -> float | None:
        """Seconds after a claim was sent that the claim ahead of it goes, or None when
        none should (the queue is idle or backlogged, or the link is local)."""
        if not self.busy or self.round_trip is None or self.round_trip < AHEAD_MIN_ROUND_TRIP:
            return None
        return self.round_trip / 2

    def share(self, available: int, wanted: int) -> int:
        """How many permits a claim reserves while claims go ahead: half of the free
        ones (at least one), so the claim ahead finds some; all it wants otherwise."""
        if self.ahead_after() is None:
            return wanted
        return min(wanted, max(1, available // 2))
