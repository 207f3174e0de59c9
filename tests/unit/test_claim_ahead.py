"""Claims ahead (ADR 0037): while claims come back with some jobs but fewer than asked,
over a link slower than a local one, the dispatcher sends a claim half a round trip after
each one its loop sent while that one is still in flight, the two sharing the permits."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.job import Claim
from awa.runtime.claim_ahead import AHEAD_MIN_ROUND_TRIP, ClaimPacer
from awa.runtime.config import QueueConfig, RateLimit
from awa.runtime.dispatcher import QueueDispatcher
from awa.runtime.permits import PermitPool
from tests.unit.test_runtime_support import enqueue

# ----------------------------------------------------------------- the pacer's rule


def test_no_claim_goes_ahead_before_one_came_back() -> None:
    assert ClaimPacer().ahead_after() is None


def test_a_busy_queue_over_a_slow_link_claims_half_a_round_trip_ahead() -> None:
    pacer = ClaimPacer()
    pacer.completed(0.020, asked=64, got=3)
    assert pacer.ahead_after() == pytest.approx(0.010)
    # the estimate follows the round trip, smoothed
    pacer.completed(0.040, asked=64, got=3)
    assert pacer.ahead_after() == pytest.approx((0.020 + 0.25 * 0.020) / 2)


@pytest.mark.parametrize(
    ("seconds", "asked", "got"),
    [
        (0.020, 64, 0),  # idle: a notification wakes the loop
        (0.020, 64, 1),  # one job per round trip: the notification-driven claim keeps up
        (0.020, 64, 64),  # backlogged: the loop claims again at once anyway
        (AHEAD_MIN_ROUND_TRIP / 2, 64, 5),  # a local link
    ],
)
def test_no_claim_goes_ahead_unless_busy_over_a_slow_link(
    seconds: float, asked: int, got: int
) -> None:
    pacer = ClaimPacer()
    pacer.completed(seconds, asked=asked, got=got)
    assert pacer.ahead_after() is None
    assert pacer.share(available=64, wanted=512) == 512


def test_a_failed_claim_stops_claims_ahead_and_permits_are_shared_while_they_go() -> None:
    pacer = ClaimPacer()
    pacer.completed(0.020, asked=64, got=3)
    assert pacer.share(available=64, wanted=512) == 32
    assert pacer.share(available=1, wanted=512) == 1
    assert pacer.share(available=64, wanted=8) == 8
    pacer.failed()
    assert pacer.ahead_after() is None


# ----------------------------------------------------------------- the dispatcher


class _SlowLinkEngine(InMemoryEngine):
    """The in-memory engine behind a link: each claim takes ``round_trip`` seconds of the
    clock, and reads the queue halfway (when it would reach the server)."""

    round_trip = 0.020

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self._link_clock = clock
        self.flights: list[tuple[float, float, int]] = []

    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
    ) -> list[Claim]:
        sent = self._link_clock.monotonic()
        await self._link_clock.sleep(self.round_trip / 2)
        got = await super().claim(
            queue,
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
            max_running_per_key=max_running_per_key,
        )
        await self._link_clock.sleep(self.round_trip / 2)
        self.flights.append((sent, self._link_clock.monotonic(), len(got)))
        return got


async def _run(
    engine: _SlowLinkEngine, clock: ManualClock, config: QueueConfig
) -> tuple[QueueDispatcher, list[Claim]]:
    """Two jobs, a first claim (which takes both), then two jobs more and a wake-up; the
    dispatcher is stopped once the clock has moved 0.1 s past the wake-up."""
    spawned: list[Claim] = []
    dispatcher = QueueDispatcher(
        config,
        engine,
        PermitPool([config], None),
        poll_interval=1.0,
        spawn=lambda _queue, claim: spawned.append(claim),
        override_refresh=3600.0,
        clock=clock,
    )
    for _ in range(2):
        await enqueue(engine, "send", queue="q")
    async with clock.autojump(), anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        await clock.sleep(0.1)
        assert len(spawned) == 2
        for _ in range(2):
            await enqueue(engine, "send", queue="q")
        # the first of them is announced; the second commits while the claim it woke is
        # on its way, after that claim has read the queue
        dispatcher.wake()
        await clock.sleep(engine.round_trip * 0.75)
        await enqueue(engine, "send", queue="q")
        await clock.sleep(0.1)
        dispatcher.stop()
    return dispatcher, spawned


@pytest.mark.anyio
async def test_a_busy_queue_over_a_slow_link_gets_a_claim_ahead_of_the_one_in_flight() -> None:
    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    config = QueueConfig(name="q", max_workers=8)
    dispatcher, spawned = await _run(engine, clock, config)
    assert dispatcher.ahead_claims >= 1
    # A claim was sent while another was in flight, half a round trip after it.
    overlapping = [
        (a, b)
        for a in engine.flights
        for b in engine.flights
        if a[0] < b[0] < a[1] and b[0] - a[0] == pytest.approx(engine.round_trip / 2)
    ]
    assert overlapping
    # The job committed behind the woken claim was taken by the claim ahead, half a round
    # trip earlier than by the next claim of the loop: by 1.5 round trips after the wake.
    ids = [c.lease.job_id for c in spawned]
    assert len(ids) == len(set(ids)) == 5
    assert dispatcher._permits.in_flight("q") == 5


@pytest.mark.anyio
async def test_no_claim_goes_ahead_over_a_local_link_or_with_a_rate_limit() -> None:
    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    engine.round_trip = AHEAD_MIN_ROUND_TRIP / 2
    dispatcher, spawned = await _run(engine, clock, QueueConfig(name="q", max_workers=8))
    assert dispatcher.ahead_claims == 0
    assert len({c.lease.job_id for c in spawned}) == 5

    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    limited = QueueConfig(name="q", max_workers=8, rate_limit=RateLimit(1000.0, 1000))
    dispatcher, spawned = await _run(engine, clock, limited)
    assert dispatcher.ahead_claims == 0
    assert len({c.lease.job_id for c in spawned}) == 5
