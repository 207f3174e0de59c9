"""Claims ahead (ADR 0037): while claims come back with some jobs but fewer than asked,
over a link slower than a local one, the dispatcher sends a claim half a round trip after
each one its loop sent while that one is still in flight, the two sharing the permits."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.job import Claim
from awa.domain.rate_limits import GlobalRateLimit
from awa.runtime import AttemptContext, HandlerRegistry
from awa.runtime.claim_ahead import AHEAD_MIN_ROUND_TRIP, ClaimPacer
from awa.runtime.config import QueueConfig, RateLimit
from awa.runtime.dispatcher import QueueDispatcher
from awa.runtime.permits import PermitPool
from tests.unit.test_runtime_support import enqueue, fast_config, running, wait_until

# ----------------------------------------------------------------- the pacer's rule


def test_no_claim_goes_ahead_before_two_came_back() -> None:
    pacer = ClaimPacer()
    assert pacer.ahead_after() is None
    pacer.completed(0.020, asked=64, got=5, at=1.0)
    assert pacer.ahead_after() is None


def _steady(
    pacer: ClaimPacer, seconds: float, got: int, every: float, asked: int = 64, start: float = 1.0
) -> None:
    """Claims of ``seconds`` each, one coming back every ``every`` seconds from ``start``
    on with ``got`` jobs."""
    for i in range(10):
        pacer.completed(seconds, asked=asked, got=got, at=start + i * every)


def test_a_busy_queue_over_a_slow_link_claims_half_a_round_trip_ahead() -> None:
    pacer = ClaimPacer()
    # 200 jobs/s over a 5 ms round trip: one job a round trip is enough
    _steady(pacer, 0.005, got=1, every=0.005)
    assert pacer.ahead_after() == pytest.approx(0.0025)
    pacer = ClaimPacer()
    # 200 jobs/s over a 20 ms round trip: 4 jobs a round trip
    _steady(pacer, 0.020, got=4, every=0.020)
    assert pacer.jobs_per_round_trip() == pytest.approx(4.0)
    assert pacer.ahead_after() == pytest.approx(0.010)
    # with claims going ahead, two claims a round trip find 2 each: still busy
    _steady(pacer, 0.020, got=2, every=0.010, start=2.0)
    assert pacer.ahead_after() == pytest.approx(0.010)
    # ... and one each: still 2 a round trip
    _steady(pacer, 0.020, got=1, every=0.010, start=3.0)
    assert pacer.ahead_after() == pytest.approx(0.010)
    # the estimate follows the round trip, smoothed
    pacer.completed(0.040, asked=64, got=1, at=4.0)
    assert pacer.round_trip == pytest.approx(0.020 + 0.25 * 0.020)


@pytest.mark.parametrize(
    ("seconds", "got", "every", "asked"),
    [
        (0.020, 0, 0.020, 64),  # idle: a notification wakes the loop
        (0.020, 1, 0.030, 64),  # fewer than one job a round trip: each claim takes one
        (0.020, 64, 0.020, 64),  # backlogged: the loop claims again at once anyway
        (AHEAD_MIN_ROUND_TRIP / 2, 5, 0.001, 64),  # a local link
    ],
)
def test_no_claim_goes_ahead_unless_busy_over_a_slow_link(
    seconds: float, got: int, every: float, asked: int
) -> None:
    pacer = ClaimPacer()
    _steady(pacer, seconds, got=got, every=every, asked=asked)
    assert pacer.ahead_after() is None


def test_a_failed_claim_stops_claims_ahead() -> None:
    pacer = ClaimPacer()
    _steady(pacer, 0.020, got=4, every=0.020)
    assert pacer.ahead_after() is not None
    pacer.failed()
    assert pacer.ahead_after() is None
    # it counts again from the next claims
    pacer.completed(0.020, asked=64, got=4, at=5.0)
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
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        sent = self._link_clock.monotonic()
        await self._link_clock.sleep(self.round_trip / 2)
        got = await super().claim(
            queue,
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
            max_running_per_key=max_running_per_key,
            global_rate_limit=global_rate_limit,
            global_rate_limit_per_key=global_rate_limit_per_key,
        )
        await self._link_clock.sleep(self.round_trip / 2)
        self.flights.append((sent, self._link_clock.monotonic(), len(got)))
        return got


def _dispatcher(
    config: QueueConfig, engine: Any, clock: ManualClock, spawned: list[Claim]
) -> QueueDispatcher:
    """A dispatcher for ``config`` on ``engine`` that polls once a second, never refreshes
    overrides, and records each claim it hands out in ``spawned``."""
    return QueueDispatcher(
        config,
        engine,
        PermitPool([config], None),
        poll_interval=1.0,
        spawn=lambda _queue, claim: spawned.append(claim),
        override_refresh=3600.0,
        clock=clock,
    )


async def _run(
    engine: _SlowLinkEngine, clock: ManualClock, config: QueueConfig, jobs: int = 60
) -> tuple[QueueDispatcher, list[Claim]]:
    """A producer commits a job every 5 ms (200 jobs/s) and announces it (the dispatcher
    is woken at once, as by a notification); stopped 0.2 s after the last job."""
    spawned: list[Claim] = []
    dispatcher = _dispatcher(config, engine, clock, spawned)
    async with clock.autojump(), anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        for _ in range(jobs):
            await enqueue(engine, "send", queue="q")
            dispatcher.wake()
            await clock.sleep(0.005)
        await clock.sleep(0.2)
        dispatcher.stop()
    return dispatcher, spawned


@pytest.mark.anyio
async def test_a_busy_queue_over_a_slow_link_gets_a_claim_ahead_of_the_one_in_flight() -> None:
    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    config = QueueConfig(name="q", max_workers=64)
    dispatcher, spawned = await _run(engine, clock, config)
    assert dispatcher.ahead_claims >= 3
    # A claim was sent while another was in flight, half a round trip after it.
    overlapping = [
        (a, b)
        for a in engine.flights
        for b in engine.flights
        if a[0] < b[0] < a[1] and b[0] - a[0] == pytest.approx(engine.round_trip / 2)
    ]
    assert overlapping
    # Claims ahead took jobs, and every job was handed out once.
    assert any(got > 0 for _, _, got in engine.flights[1:])
    ids = [c.lease.job_id for c in spawned]
    assert len(ids) == len(set(ids)) == 60
    assert dispatcher._permits.in_flight("q") == 60


@pytest.mark.anyio
async def test_no_claim_goes_ahead_over_a_local_link_or_with_a_rate_limit() -> None:
    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    engine.round_trip = AHEAD_MIN_ROUND_TRIP / 2
    dispatcher, spawned = await _run(engine, clock, QueueConfig(name="q", max_workers=64))
    assert dispatcher.ahead_claims == 0
    assert len({c.lease.job_id for c in spawned}) == 60

    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    limited = QueueConfig(name="q", max_workers=64, rate_limit=RateLimit(1000.0, 1000))
    dispatcher, spawned = await _run(engine, clock, limited)
    assert dispatcher.ahead_claims == 0
    assert len({c.lease.job_id for c in spawned}) == 60


# ------------------------------------------------- a notification during a claim


class _GatedEngine(InMemoryEngine):
    """The first claim reads the queue at once and then waits for ``gate`` before it
    comes back (a claim whose answer is slow: a loaded server or host); the others come
    back at once."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.gate = anyio.Event()
        self.sent = 0
        self.returned: list[int] = []

    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        self.sent += 1
        first = self.sent == 1
        got = await super().claim(queue, limit=limit, deadline=deadline)
        if first:
            await self.gate.wait()
        self.returned.append(len(got))
        return got


async def _notified_during_a_claim(
    config: QueueConfig,
) -> tuple[QueueDispatcher, _GatedEngine, list[Claim], list[Claim]]:
    """The loop's claim finds the queue empty and is slow to come back; a job commits
    and is announced meanwhile. Returns the dispatcher, the engine, what was spawned
    before the slow claim came back, and everything spawned."""
    clock = ManualClock()
    engine = _GatedEngine(clock)
    spawned: list[Claim] = []
    dispatcher = _dispatcher(config, engine, clock, spawned)
    async with anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        while engine.sent == 0:
            await anyio.sleep(0)
        (job,) = await enqueue(engine, "send", queue="q")
        dispatcher.wake()
        for _ in range(50):
            await anyio.sleep(0)
        before = list(spawned)
        engine.gate.set()
        while not spawned:
            await anyio.sleep(0)
        for _ in range(50):
            await anyio.sleep(0)
        dispatcher.stop()
    assert [c.lease.job_id for c in spawned] == [job.id]
    return dispatcher, engine, before, spawned


@pytest.mark.anyio
async def test_a_notification_while_the_claim_is_in_flight_claims_at_once() -> None:
    dispatcher, engine, before, _ = await _notified_during_a_claim(
        QueueConfig(name="q", max_workers=64)
    )
    # The job started while the slow claim was still out, taken by a claim sent at its
    # notification beside it, and nothing was claimed twice. That claim took a job, so
    # the loop did not look again once its own was back.
    assert len(before) == 1
    assert dispatcher.wake_claims == 1
    assert engine.sent == 2
    assert sorted(engine.returned) == [0, 1]
    assert dispatcher._permits.in_flight("q") == 1


@pytest.mark.anyio
async def test_with_a_rate_limit_a_notification_waits_for_the_claim_in_flight() -> None:
    dispatcher, engine, before, _ = await _notified_during_a_claim(
        QueueConfig(name="q", max_workers=64, rate_limit=RateLimit(1000.0, 1000))
    )
    # The loop claimed again once its claim came back (the pending wake).
    assert before == []
    assert dispatcher.wake_claims == 0
    assert engine.sent == 2
    assert engine.returned == [0, 1]


class _LockedLaneEngine(InMemoryEngine):
    """One lane, as on Postgres: the first claim takes what it sees and holds the lane
    until ``gate`` is set (a slow answer); a claim sent meanwhile skips the locked lane
    and comes back empty, whatever committed since (claims skip locked lane heads)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.gate = anyio.Event()
        self.sent = 0
        self.returned: list[int] = []
        self._held = False

    async def claim(self, queue: str, **kwargs: Any) -> list[Claim]:
        self.sent += 1
        if self._held:
            self.returned.append(0)
            return []
        got = await super().claim(queue, limit=kwargs["limit"], deadline=kwargs["deadline"])
        if self.sent == 1:
            self._held = True
            try:
                await self.gate.wait()
            finally:
                self._held = False
        self.returned.append(len(got))
        return got


@pytest.mark.anyio
async def test_a_job_behind_the_lane_of_the_claim_in_flight_is_claimed_when_it_is_back() -> None:
    """The loop's claim takes one job and holds the lane; a second job commits after its
    snapshot and is announced. The claim sent at the notification finds the lane locked
    and comes back empty, so the loop claims again as soon as its claim is back, without
    waiting for its re-check timer or poll (the clock never moves here)."""
    clock = ManualClock()
    engine = _LockedLaneEngine(clock)
    config = QueueConfig(name="q", max_workers=64)
    spawned: list[Claim] = []
    dispatcher = _dispatcher(config, engine, clock, spawned)
    (first,) = await enqueue(engine, "send", queue="q")
    async with anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        while engine.sent == 0:
            await anyio.sleep(0)
        (second,) = await enqueue(engine, "send", queue="q")
        dispatcher.wake()
        while len(engine.returned) < 1:
            await anyio.sleep(0)
        engine.gate.set()
        for _ in range(100):
            await anyio.sleep(0)
        dispatcher.stop()
    assert dispatcher.wake_claims == 1
    # the claim at the notification came back empty, the loop's with the first job
    assert engine.returned[:2] == [0, 1]
    assert [c.lease.job_id for c in spawned] == [first.id, second.id]


def test_a_claim_reserves_half_the_free_permits_unless_the_last_came_back_full() -> None:
    pacer = ClaimPacer()
    assert pacer.share(available=64, wanted=512, backlogged=False) == 32
    assert pacer.share(available=64, wanted=512, backlogged=True) == 512
    assert pacer.share(available=1, wanted=512, backlogged=False) == 1
    assert pacer.share(available=64, wanted=8, backlogged=False) == 8


# ------------------------------------------------------- a backlog of short jobs


class _CountingEngine(InMemoryEngine):
    """Records how many jobs each claim asked for."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.asked: list[int] = []

    async def claim(self, queue: str, **kwargs: Any) -> list[Claim]:
        self.asked.append(kwargs["limit"])
        return await super().claim(queue, **kwargs)


@pytest.mark.anyio
async def test_a_backlog_of_short_jobs_is_claimed_in_whole_batches() -> None:
    """Handlers that finish within one pass of the event loop give their permits back
    before the next claim: a backlog is claimed a whole batch (every free slot) at a
    time, not in halves that alternate with each other's handlers (twice the claims, and
    a fifth more server CPU per job)."""
    engine = _CountingEngine()
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler)
    slots = 16
    await enqueue(engine, "k", count=slots * 10)
    config = fast_config(handlers, [("default", slots)])
    async with running(engine, handlers, config):
        await wait_until(lambda: len(done) == slots * 10)
    # The first claim has no history yet and takes half; from then on, whole ones.
    assert [n for n in engine.asked if n < slots] == [slots // 2]


@pytest.mark.anyio
async def test_claims_reach_the_server_every_half_round_trip_while_busy() -> None:
    # Every loop claim gets its claim ahead, also while the one ahead of the loop's
    # previous claim is still in flight: claims reach the server (halfway through their
    # flight) half a round trip apart, so no job waits there longer than that. An ahead
    # claim awaited in the loop that sends them left every other loop claim without one:
    # gaps of a whole round trip.
    clock = ManualClock()
    engine = _SlowLinkEngine(clock)
    dispatcher, spawned = await _run(engine, clock, QueueConfig(name="q", max_workers=64))
    assert dispatcher.ahead_claims >= 6
    half = engine.round_trip / 2
    # While the producer commits a job every 5 ms (0.3 s), after the first claims.
    start = engine.flights[0][0]
    arrivals = sorted(sent + half for sent, _, _ in engine.flights if 0.06 <= sent - start <= 0.26)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(arrivals) >= 12
    assert max(gaps) <= half + 1e-9, gaps
    assert len({c.lease.job_id for c in spawned}) == 60
