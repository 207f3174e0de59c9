"""The maintenance leader deletes the fleet-wide rate limiters that refilled their whole
burst, so ``awa.rate_limiters`` holds the keys in use, not every key ever claimed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.job import JobSpec
from awa.domain.policies import NO_JITTER
from awa.domain.rate_limits import PRUNE_BATCH, GlobalRateLimit, idle, key_limiter
from awa.entrypoints.routing import inmemory_control_plane
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import MaintenanceDuties
from tests.unit.test_runtime_support import FAST

pytestmark = pytest.mark.anyio


def test_a_limiter_is_idle_once_its_tat_is_not_ahead() -> None:
    now = ManualClock().now()
    assert idle(now, now)
    assert idle(now - timedelta(seconds=1), now)
    assert not idle(now + timedelta(microseconds=1), now)


async def test_the_leader_prunes_idle_limiters_in_batches() -> None:
    clock = ManualClock()
    engine = InMemoryEngine(clock=clock, backoff=NO_JITTER)
    control = inmemory_control_plane(engine, clock)
    fences: list[int] = []
    config = parse_start_args(None, handler_queues={"mail"}, **FAST)
    duties = MaintenanceDuties(
        engine, config, InFlight(), fence=lambda: fences.append(1), clock=clock, control=control
    ).schedule()
    (duty,) = [d for d in duties if d.name == "rate_limiter_cleanup"]
    assert duty.interval == config.cleanup_interval
    keys = PRUNE_BATCH + 5
    await engine.enqueue_many(
        [
            JobSpec(kind="send", queue="mail", metadata={CONCURRENCY_KEY_METADATA: f"k{i}"})
            for i in range(keys)
        ]
    )
    per_key = GlobalRateLimit(rate=1.0, burst=1)
    claimed = await engine.claim("mail", limit=keys, global_rate_limit_per_key=per_key)
    assert len(claimed) == keys
    assert len(await control.rate_limiters.limiter_states()) == keys
    # Just short of the refill every key still holds its next job back: nothing goes.
    clock.advance(timedelta(milliseconds=999))
    await duty.run()
    assert len(await control.rate_limiters.limiter_states()) == keys
    await engine.enqueue_many(
        [JobSpec(kind="send", queue="mail", metadata={CONCURRENCY_KEY_METADATA: "k0"})]
    )
    clock.advance(timedelta(milliseconds=1))
    # k0 claims again at the refill and its limiter moves a second ahead.
    assert len(await engine.claim("mail", limit=10, global_rate_limit_per_key=per_key)) == 1
    fences.clear()
    await duty.run()
    assert len(fences) == 2  # two batches, the lease checked before each
    (left,) = await control.rate_limiters.limiter_states()
    assert left.limiter == key_limiter("k0")
