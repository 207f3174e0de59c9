"""When a dispatcher sends a second claim before its first one is back (ADR 0037).

A job's notification reaches a worker half a round trip after the job committed, and the
claim it wakes costs a whole round trip more, so a loop driven by notifications starts a
job one round trip after its producer heard the commit, however fast the database is.
While jobs arrive at one or more per claim round trip, claims that reach the server
more often shorten that wait: a claim sent half a round trip after the one in flight
reaches the server half a round trip later, and takes whatever committed in between.

:class:`ClaimPacer` decides, from the claims a dispatcher completed, whether that holds
and how long after a claim was sent the one ahead goes. Pure bookkeeping: the dispatcher
owns the loop, the permits and the clock.
"""

from __future__ import annotations

from collections import deque

import attrs

#: Claims go ahead while the queue's claims take at least this many jobs per claim round
#: trip (each job would otherwise wait a whole claim round trip after its notification)
#: and the last claim came back with fewer than it asked for (busy, not backlogged).
#: One, not two: at 200 jobs/s over a 5 ms link (1.4 jobs a round trip) claims ahead
#: took the harness's pickup p50 from 5.0-5.4 to 3.8-4.1 ms (ADR 0037, amendment).
AHEAD_MIN_JOBS = 1
#: How many recent claims the pickup rate is counted over.
_RATE_WINDOW = 8
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
    #: Whether the claims found the queue busy but not backlogged.
    busy: bool = False
    # (when it came back, jobs taken) of the last claims, every loop's and ahead's
    _recent: deque[tuple[float, int]] = attrs.field(factory=lambda: deque(maxlen=_RATE_WINDOW))

    def completed(self, seconds: float, asked: int, got: int, at: float) -> None:
        """A claim of ``asked`` jobs came back with ``got`` after ``seconds``, at the
        monotonic instant ``at``. The rule counts jobs per round trip over the last
        claims, not per claim: two claims a round trip each find about half of them."""
        if self.round_trip is None:
            self.round_trip = seconds
        else:
            self.round_trip += _SMOOTHING * (seconds - self.round_trip)
        self._recent.append((at, got))
        self.busy = got < asked and self.jobs_per_round_trip() >= AHEAD_MIN_JOBS

    def jobs_per_round_trip(self) -> float:
        """Jobs the recent claims took per claim round trip (0 until two came back)."""
        if len(self._recent) < 2 or self.round_trip is None:
            return 0.0
        span = self._recent[-1][0] - self._recent[0][0]
        if span <= 0:
            return 0.0
        # The first claim's jobs arrived before the span began.
        taken = sum(got for _, got in list(self._recent)[1:])
        return taken / span * self.round_trip

    def failed(self) -> None:
        """A claim failed: no claim goes ahead until one succeeds again."""
        self.busy = False
        self._recent.clear()

    def ahead_after(self) -> float | None:
        """Seconds after a claim was sent that the claim ahead of it goes, or None when
        none should (the queue is idle or backlogged, or the link is local)."""
        if not self.busy or self.round_trip is None or self.round_trip < AHEAD_MIN_ROUND_TRIP:
            return None
        return self.round_trip / 2

    def share(self, available: int, wanted: int, backlogged: bool) -> int:
        """How many permits a claim reserves: all it wants while the last claim came
        back full (``backlogged``: jobs are waiting, and the loop claims again at once);
        otherwise half of the free ones (at least one), so that a claim beside it (ahead
        of it, or sent at a notification while it is in flight) finds some."""
        if backlogged:
            return wanted
        return min(wanted, max(1, available // 2))
