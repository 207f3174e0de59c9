"""Fleet-wide rate limits: under any interleaving of claimers, claim sizes and clock
advances, the limiter (GCRA in integer microseconds, as every engine applies it) never
admits more than ``burst + max_rate * t`` jobs in any window of ``t`` seconds, and a
limiter left idle admits its whole burst again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from awa.domain.rate_limits import GlobalRateLimit, advance, allowance

START = datetime(2026, 1, 1, tzinfo=UTC)


class FleetLimiter(RuleBasedStateMachine):
    """Several claimers share one limiter row: each claim reads it under its lock, takes
    at most what it admits and moves it forward; the clock moves between claims."""

    def __init__(self) -> None:
        super().__init__()
        self.limit = GlobalRateLimit(rate=1.0, burst=1)
        self.now = START
        self.tat: datetime | None = None
        self.admitted: list[datetime] = []

    @initialize(
        rate=st.floats(0.1, 5000, allow_nan=False),
        burst=st.integers(1, 50),
    )
    def start(self, rate: float, burst: int) -> None:
        self.limit = GlobalRateLimit(rate=rate, burst=burst)

    @rule(claimer=st.integers(0, 3), wanted=st.integers(0, 80))
    def claim(self, claimer: int, wanted: int) -> None:
        allowed = allowance(self.limit, self.tat, self.now)
        assert 0 <= allowed <= self.limit.burst
        taken = min(wanted, allowed)
        self.tat = advance(self.limit, self.tat, self.now, taken)
        self.admitted.extend([self.now] * taken)

    @rule(us=st.integers(0, 3_000_000))
    def advance_clock(self, us: int) -> None:
        self.now += timedelta(microseconds=us)

    @invariant()
    def never_more_than_burst_plus_rate_times_window(self) -> None:
        # Admissions grouped by instant; every window from one instant to a later one
        # (the tightest windows there are) holds at most burst + rate * its length.
        instants = sorted(set(self.admitted))
        counts = [self.admitted.count(t) for t in instants]
        for i, first in enumerate(instants):
            total = 0
            for j in range(i, len(instants)):
                total += counts[j]
                window = (instants[j] - first).total_seconds()
                assert total <= self.limit.burst + self.limit.rate * window + 1e-9, (
                    total,
                    window,
                    self.limit,
                )


TestFleetLimiter = FleetLimiter.TestCase


@given(
    rate=st.floats(0.01, 10_000, allow_nan=False),
    burst=st.integers(1, 1000),
    taken=st.integers(0, 1000),
)
def test_an_idle_limiter_admits_its_whole_burst_again(rate: float, burst: int, taken: int) -> None:
    limit = GlobalRateLimit(rate=rate, burst=burst)
    taken = min(taken, burst)
    tat = advance(limit, None, START, taken)
    later = START + timedelta(microseconds=burst * limit.interval_us)
    assert allowance(limit, tat, later) == burst
