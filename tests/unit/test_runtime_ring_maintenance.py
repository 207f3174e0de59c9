"""The maintenance leader rotates and prunes engines that keep jobs in a ring."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.leadership import LeaseLapsed
from awa.domain.policies import DEFAULT_CARRY_BATCH, NO_JITTER, RingSeal
from awa.ports.maintenance import RingMaintenance
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance import MaintenanceLeader
from awa.runtime.maintenance_duties import MaintenanceDuties
from tests.unit.test_runtime_support import FAST, clock_of, on_clock, within

pytestmark = pytest.mark.anyio


class RingEngine(InMemoryEngine):
    """The in-memory engine plus a scripted ring: prune answers from a queue of words."""

    def __init__(self, prune_answers: list[str], lease_prune_answers: list[str] | None = None):
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.rotations = 0
        self.seals: list[RingSeal | None] = []
        self.prunes: list[timedelta] = []
        self.carry_batches: list[int] = []
        self._answers = prune_answers
        self.lease_rotations = 0
        self.lease_prunes = 0
        self._lease_answers = lease_prune_answers or []

    async def rotate(self, *, seal: RingSeal | None = None) -> str:
        self.seals.append(seal)
        self.rotations += 1
        return "rotated"

    async def prune(
        self, *, failed_retention: timedelta, carry_batch: int = DEFAULT_CARRY_BATCH
    ) -> str:
        self.prunes.append(failed_retention)
        self.carry_batches.append(carry_batch)
        return self._answers.pop(0) if self._answers else "idle"

    async def rotate_leases(self) -> str:
        self.lease_rotations += 1
        return "rotated"

    async def prune_leases(self) -> str:
        self.lease_prunes += 1
        return self._lease_answers.pop(0) if self._lease_answers else "idle"


async def _lead_for(
    engine: InMemoryEngine,
    seconds: float,
    *,
    lease_rotate_ms: int = 250,
    queue_rotate_ms: int = 20,
    **options: Any,
) -> MaintenanceLeader:
    config = parse_start_args(
        None,
        handler_queues={"q"},
        **{
            **FAST,
            "queue_storage_queue_rotate_interval_ms": queue_rotate_ms,
            "queue_storage_lease_rotate_interval_ms": lease_rotate_ms,
            "failed_retention_hours": 5,
            **options,
        },
    )
    clock = clock_of(engine)
    assert isinstance(clock, ManualClock)
    leader = MaintenanceLeader(engine, engine.leader_lock(), config, InFlight(), clock=clock)
    async with on_clock(clock):
        with clock.move_on_after(seconds):
            await leader.run()
    return leader


async def test_leader_rotates_and_prunes_a_ring_engine() -> None:
    engine = RingEngine(["pruned", "pruned", "blocked"])
    assert isinstance(engine, RingMaintenance)
    leader = await _lead_for(engine, 0.3)
    assert engine.rotations >= 3
    # one prune per tick, each answer seen once, then the ring is idle
    assert leader.ring_outcomes["pruned"] == 2
    assert leader.ring_outcomes["blocked"] == 1
    assert all(retention == timedelta(hours=5) for retention in engine.prunes)
    # every rotation asks with the leader's seal rule, made of the configured interval
    assert engine.seals and set(engine.seals) == {RingSeal(interval=timedelta(milliseconds=20))}


async def test_a_carrying_prune_goes_again_at_once_with_the_configured_bound() -> None:
    """A prune that moved one bounded step of a backlog (``carried``) is called again
    as soon as the other duties had their turn, not a whole interval later, each call
    with the configured bound, until it reclaims the slot."""
    engine = RingEngine(["carried"] * 5 + ["pruned"])
    # One ring tick in the 0.5 s simulated: without going again, one step would be done.
    leader = await _lead_for(engine, 0.5, queue_rotate_ms=10_000, queue_storage_carry_batch_size=7)
    assert leader.ring_outcomes["carried"] == 5
    assert leader.ring_outcomes["pruned"] == 1
    assert leader.runs["ring"] == 6
    assert set(engine.carry_batches) == {7}
    # the default bound, when none is configured
    default = RingEngine(["idle"])
    await _lead_for(default, 0.05)
    assert default.carry_batches[0] == DEFAULT_CARRY_BATCH


def test_the_carry_bound_is_checked() -> None:
    for bad in (0, -3):
        with pytest.raises(ValueError, match="queue_storage_carry_batch_size"):
            parse_start_args(None, handler_queues={"q"}, queue_storage_carry_batch_size=bad)
    with pytest.raises(TypeError, match="queue_storage_carry_batch_size"):
        parse_start_args(None, handler_queues={"q"}, queue_storage_carry_batch_size=2.5)  # type: ignore[arg-type]


async def test_a_ring_duty_stops_between_steps_once_its_lease_lapsed() -> None:
    """The duty asks its fence before each step: once the lease lapsed (here after the
    second carried step) nothing more is done under it."""
    engine = RingEngine(["carried"] * 10)
    config = parse_start_args(
        None, handler_queues={"q"}, **{**FAST, "queue_storage_carry_batch_size": 3}
    )
    fences = 0

    def fence() -> None:
        nonlocal fences
        fences += 1
        if fences > 4:
            raise LeaseLapsed

    duties = MaintenanceDuties(engine, config, InFlight(), fence=fence, clock=clock_of(engine))
    ring = next(d for d in duties.schedule() if d.name == "ring")
    assert await ring.run() is True
    assert await ring.run() is True
    with pytest.raises(LeaseLapsed):
        await ring.run()
    # two steps, each a prune and a rotation; the third never reached the engine
    assert len(engine.prunes) == 2 and engine.rotations == 2
    assert duties.ring_outcomes["carried"] == 2


async def test_leader_turns_the_lease_ring_on_its_own_interval() -> None:
    engine = RingEngine([], ["pruned", "blocked"])
    leader = await _lead_for(engine, 0.3, lease_rotate_ms=20)
    assert engine.lease_rotations >= 3 and engine.lease_prunes >= 3
    # prune before rotate, every tick; the answers are kept apart from the queue ring's
    assert leader.lease_ring_outcomes["pruned"] == 1
    assert leader.lease_ring_outcomes["blocked"] == 1
    assert leader.lease_ring_outcomes["rotated"] == engine.lease_rotations
    assert "pruned" not in leader.ring_outcomes
    # a slower lease interval runs the lease duty less often than the queue ring duty
    slow = RingEngine([])
    slow_leader = await _lead_for(slow, 0.3, lease_rotate_ms=1000)
    assert slow.lease_rotations == 1
    assert slow_leader.runs["lease_ring"] == 1 and slow_leader.runs["ring"] > 3


async def test_engines_without_a_ring_get_no_ring_duty() -> None:
    engine = InMemoryEngine(clock=ManualClock(), backoff=NO_JITTER)
    assert not isinstance(engine, RingMaintenance)
    leader = await _lead_for(engine, 0.15)
    assert "ring" not in leader.runs and "lease_ring" not in leader.runs
    assert leader.runs.get("promote", 0) > 0


class SlowPromoteEngine(InMemoryEngine):
    """Promotion takes a while, like a maintenance statement on a busy database."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.started = anyio.Event()
        self.finished = 0
        self.cancelled = 0

    async def promote_due(self, *, limit: int = 1000) -> int:
        self.started.set()
        try:
            await clock_of(self).sleep(0.2)
        except BaseException:
            self.cancelled += 1
            raise
        self.finished += 1
        return 0


def _slow_leader() -> tuple[SlowPromoteEngine, MaintenanceLeader]:
    engine = SlowPromoteEngine()
    config = parse_start_args(None, handler_queues={"q"}, **FAST)
    return engine, MaintenanceLeader(
        engine, engine.leader_lock(), config, InFlight(), clock=clock_of(engine)
    )


async def _stop_during_promotion(engine: SlowPromoteEngine, leader: MaintenanceLeader) -> None:
    """Run the leader, stop it while its promotion is under way, wait until it has ended."""
    async with on_clock(clock_of(engine)), anyio.create_task_group() as tg:
        tg.start_soon(leader.run)
        await engine.started.wait()
        leader.stop()
        with within(5):
            await leader.wait_stopped()


async def test_stop_lets_the_duty_under_way_finish() -> None:
    engine, leader = _slow_leader()
    await _stop_during_promotion(engine, leader)
    assert (engine.finished, engine.cancelled) == (1, 0)
    assert not leader.is_leader
    # the lock was given up: another leader can take it at once
    assert (await engine.leader_lock().try_acquire(30.0)).held


async def test_a_stopped_leader_runs_again_once_rearmed() -> None:
    engine, leader = _slow_leader()
    leader.stop()
    clock = clock_of(engine)
    before = clock.monotonic()
    async with on_clock(clock):
        await leader.run()
    # returned at once, stopped before it started: not one timer of the clock ran
    assert clock.monotonic() == before
    assert engine.finished == 0
    leader.rearm()
    await _stop_during_promotion(engine, leader)
    assert engine.finished == 1
