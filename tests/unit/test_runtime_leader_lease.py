"""The maintenance leader keeps its lease by renewing it, steps down once it ran out or
changed hands, and the event loop's watchdog names a handler that blocks the loop."""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import anyio.to_thread
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.leadership import Lease, LeasePolicy
from awa.domain.policies import NO_JITTER
from awa.runtime import HandlerRegistry, parse_start_args
from awa.runtime.context import AttemptContext
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance import MaintenanceLeader
from tests.unit.test_runtime_support import (
    FAST,
    clock_of,
    enqueue,
    fast_config,
    on_clock,
    running,
    wait_until,
)

pytestmark = pytest.mark.anyio


class BlockingPromoteEngine(InMemoryEngine):
    """Records every maintenance call; its first promotion stalls the loop it runs on
    (as a stopped or starved process would): ``block`` seconds of the clock pass while
    nothing on the loop runs."""

    def __init__(self, events: list[str], block: float) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.events = events
        self.block = block

    async def promote_due(self, *, limit: int = 4096) -> int:
        self.events.append("promote")
        if self.block:
            clock_of(self).advance(self.block)  # the lease runs out meanwhile
            self.block = 0.0
            self.events.append("promote blocked")
        return await super().promote_due(limit=limit)

    async def rescue_stale_heartbeats(self, *, staleness: Any) -> Any:
        self.events.append("rescue")
        return await super().rescue_stale_heartbeats(staleness=staleness)


class RecordingLock:
    """The engine's lease, with every call written to the same event list."""

    def __init__(self, engine: InMemoryEngine, events: list[str]) -> None:
        self._inner = engine.leader_lock()
        self._events = events

    async def try_acquire(self, ttl: float) -> Lease:
        lease = await self._inner.try_acquire(ttl)
        self._events.append("acquired" if lease.held else "refused")
        return lease

    async def still_held(self) -> bool:
        return await self._inner.still_held()

    async def release(self) -> None:
        self._events.append("released")
        await self._inner.release()


async def test_a_leader_whose_lease_ran_out_steps_down_before_acting_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []
    engine = BlockingPromoteEngine(events, block=0.5)
    config = parse_start_args(None, handler_queues={"q"}, **FAST, leader_lease_ttl_ms=300)
    leader = MaintenanceLeader(
        engine, RecordingLock(engine, events), config, InFlight(), clock=clock_of(engine)
    )
    caplog.set_level(logging.WARNING, logger="awa.runtime.maintenance")
    async with on_clock(clock_of(engine)), anyio.create_task_group() as tg:
        tg.start_soon(leader.run)
        await wait_until(lambda: events.count("promote") >= 3)
        leader.stop()
    blocked = events.index("promote blocked")
    # Nothing was done under the lapsed lease: the next step gave it up, and the next
    # action came only after the lease was taken again.
    assert events[blocked + 1] == "released"
    assert events[blocked + 2] == "acquired"
    assert "ran out" in caplog.text and "stepping down before acting again" in caplog.text


async def test_a_leader_whose_lease_changed_hands_stops_at_its_next_renewal() -> None:
    engine = InMemoryEngine(clock=ManualClock(), backoff=NO_JITTER)
    config = parse_start_args(None, handler_queues={"q"}, **FAST, leader_lease_ttl_ms=300)
    leader = MaintenanceLeader(
        engine, engine.leader_lock(), config, InFlight(), clock=clock_of(engine)
    )
    usurper = engine.leader_lock()
    async with on_clock(clock_of(engine)), anyio.create_task_group() as tg:
        tg.start_soon(leader.run)
        await wait_until(lambda: leader.is_leader)
        first_term = leader.term
        # The lease is handed to someone else (as if this leader had been cut off).
        engine.election.revoke()
        assert (await usurper.try_acquire(30.0)).held
        await wait_until(lambda: not leader.is_leader, timeout=2)
        assert (await usurper.try_acquire(30.0)).term == first_term + 1
        leader.stop()


class StuckPromoteEngine(InMemoryEngine):
    """Its second promotion hangs (a statement waiting for a lock a stopped session
    holds) until cancelled."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.calls = 0
        self.stuck = anyio.Event()
        self.cut_off = anyio.Event()

    async def promote_due(self, *, limit: int = 4096) -> int:
        self.calls += 1
        if self.calls == 2:
            self.stuck.set()
            try:
                await anyio.sleep_forever()
            finally:
                self.cut_off.set()
        return await super().promote_due(limit=limit)


async def test_a_duty_still_running_when_the_lease_ends_is_cut_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = StuckPromoteEngine()
    config = parse_start_args(None, handler_queues={"q"}, **FAST, leader_lease_ttl_ms=300)
    leader = MaintenanceLeader(
        engine, engine.leader_lock(), config, InFlight(), clock=clock_of(engine)
    )
    caplog.set_level(logging.WARNING, logger="awa.runtime.maintenance")
    async with on_clock(clock_of(engine)), anyio.create_task_group() as tg:
        tg.start_soon(leader.run)
        await engine.stuck.wait()
        stuck_at = clock_of(engine).monotonic()
        # Cut off once the lease it runs under ended (300 ms at most), not later.
        await engine.cut_off.wait()
        assert clock_of(engine).monotonic() - stuck_at <= 0.3
        # Leadership is taken again (nobody else wants it) and maintenance goes on.
        await wait_until(lambda: engine.calls >= 3 and leader.is_leader)
        leader.stop()
    assert "maintenance duty promote did not finish while the lease" in caplog.text


def test_the_lease_policy_counts_from_before_the_request_and_follows_the_holder() -> None:
    policy = LeasePolicy(ttl=6.0)
    assert policy.renew_every == 2.0
    ours = Lease(held=True, expires_in=6.0, term=3, holder="a")
    assert policy.valid_until(100.0, ours) == 106.0
    assert policy.may_act(105.9, 106.0) and not policy.may_act(106.0, 106.0)
    assert policy.valid_until(100.0, Lease(held=False, expires_in=4.0)) is None
    # A follower tries again just after the holder's lease would end, at most every
    # election interval; a free lease means at once.
    assert policy.retry_in(Lease(held=False, expires_in=4.0), 10.0) == pytest.approx(4.05)
    assert policy.retry_in(Lease(held=False, expires_in=4.0), 0.5) == 0.5
    assert policy.retry_in(Lease(held=False, expires_in=0.0), 10.0) == pytest.approx(0.05)
    assert policy.takeover_bound(10.0) < 10.0


async def test_the_watchdog_names_an_async_handler_that_blocks_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = InMemoryEngine(clock=ManualClock(), backoff=NO_JITTER)
    clock = clock_of(engine)
    handlers = HandlerRegistry()
    blocking = threading.Event()
    release = threading.Event()

    async def blocking_handler(ctx: AttemptContext) -> None:
        blocking.set()
        release.wait(10)  # the mistake the watchdog is there to name

    handlers.register("blocker", blocking_handler)
    caplog.set_level(logging.WARNING, logger="awa.runtime.loop")
    reported = threading.Event()
    recovered = threading.Event()

    class _Reported(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "has been blocked" in record.getMessage():
                reported.set()
            if "running again" in record.getMessage():
                recovered.set()

    signal = _Reported()
    logging.getLogger("awa.runtime.loop").addHandler(signal)
    async with running(engine, handlers, fast_config(handlers), leader=False) as runtime:

        def stall() -> None:
            """While the loop is stuck, 1.5 s pass on the clock (the threshold is 1 s);
            the watcher thread reports the block before the handler lets go."""
            blocking.wait(10)
            try:
                for _ in range(15):
                    clock.advance(0.1)
                reported.wait(10)
            finally:
                release.set()

        helper = threading.Thread(target=stall)
        helper.start()
        try:
            [record] = await enqueue(engine, "blocker")
            # The watcher thread notices the recovery a tick of the clock after the loop
            # ticks again, on its own thread: move the clock a tick at a time and give the
            # thread its turn each time, rather than let the clock jump past its turn.
            for _ in range(200):
                if recovered.is_set():
                    break
                clock.advance(0.1)
                await anyio.to_thread.run_sync(recovered.wait, 0.05)
            assert recovered.is_set(), "the watchdog never said the loop runs again"
        finally:
            release.set()
            await anyio.to_thread.run_sync(helper.join)
            logging.getLogger("awa.runtime.loop").removeHandler(signal)
    assert runtime.watchdog.blocks == 1
    blocked = [r.getMessage() for r in caplog.records if "has been blocked" in r.getMessage()]
    assert len(blocked) == 1
    assert f"handler kind=blocker job {record.id} attempt 1 (queue default)" in blocked[0]
