"""The maintenance leader rotates and prunes engines that keep jobs in a ring."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.policies import NO_JITTER
from awa.ports.maintenance import RingMaintenance
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance import MaintenanceLeader
from tests.unit.test_runtime_support import FAST

pytestmark = pytest.mark.anyio


class RingEngine(InMemoryEngine):
    """The in-memory engine plus a scripted ring: prune answers from a queue of words."""

    def __init__(self, prune_answers: list[str]) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.rotations = 0
        self.prunes: list[timedelta] = []
        self._answers = prune_answers

    async def rotate(self) -> str:
        self.rotations += 1
        return "rotated"

    async def prune(self, *, failed_retention: timedelta) -> str:
        self.prunes.append(failed_retention)
        return self._answers.pop(0) if self._answers else "idle"


async def _lead_for(engine: InMemoryEngine, seconds: float) -> MaintenanceLeader:
    config = parse_start_args(
        None,
        handler_queues={"q"},
        **{**FAST, "queue_storage_queue_rotate_interval_ms": 20, "failed_retention_hours": 5},
    )
    leader = MaintenanceLeader(engine, engine.leader_lock(), config, InFlight())
    with anyio.move_on_after(seconds):
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


async def test_engines_without_a_ring_get_no_ring_duty() -> None:
    engine = InMemoryEngine(clock=ManualClock(), backoff=NO_JITTER)
    assert not isinstance(engine, RingMaintenance)
    leader = await _lead_for(engine, 0.15)
    assert "ring" not in leader.runs
    assert leader.runs.get("promote", 0) > 0
