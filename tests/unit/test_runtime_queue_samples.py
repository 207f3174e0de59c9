"""The maintenance leader records each queue's depth and lag once a minute and keeps a
day of them (the admin dashboard's depth and lag charts)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.admin_views import QUEUE_SAMPLES_KEPT, QueueSample
from awa.domain.job import JobSpec
from awa.domain.policies import NO_JITTER
from awa.domain.states import JobState
from awa.entrypoints.routing import inmemory_control_plane
from awa.ports.control_plane import ControlPlane
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import Duty, MaintenanceDuties
from tests.unit.test_runtime_support import FAST

pytestmark = pytest.mark.anyio


def _duty(
    engine: InMemoryEngine, control: ControlPlane, clock: ManualClock, fences: list[int]
) -> Duty:
    config = parse_start_args(None, handler_queues={"mail"}, **FAST)
    duties = MaintenanceDuties(
        engine, config, InFlight(), fence=lambda: fences.append(1), clock=clock, control=control
    ).schedule()
    (duty,) = [d for d in duties if d.name == "queue_samples"]
    return duty


async def test_the_leader_samples_depth_and_lag_and_prunes_old_samples() -> None:
    clock = ManualClock()
    engine = InMemoryEngine(clock=clock, backoff=NO_JITTER)
    fences: list[int] = []
    control = inmemory_control_plane(engine, clock)
    store = control.queue_samples
    duty = _duty(engine, control, clock, fences)
    assert duty.interval == 60.0
    start = clock.now()
    old = QueueSample(
        sampled_at=start - QUEUE_SAMPLES_KEPT - timedelta(minutes=1),
        queue="mail",
        counts={},
        lag_seconds=0.0,
    )
    await store.record_queue_samples([old])
    await engine.enqueue_many([JobSpec(kind="send", queue="mail") for _ in range(3)])
    await engine.enqueue_many([JobSpec(kind="report", queue="reports")])
    (claimed,) = await engine.claim("reports", limit=1)
    clock.advance(timedelta(seconds=90))
    await duty.run()
    samples = await store.queue_samples(since=start - timedelta(days=2))
    assert [(s.queue, s.sampled_at) for s in samples] == [
        ("mail", clock.now()),
        ("reports", clock.now()),
    ]
    mail, reports = samples
    assert mail.count(JobState.Available) == 3 and mail.lag_seconds == 90.0
    assert reports.count(JobState.Running) == 1 and reports.lag_seconds == 0.0
    assert len(fences) == 2  # the lease is checked before each write
    clock.advance(timedelta(minutes=1))
    await engine.complete([claimed.lease])
    await duty.run()
    later = await store.queue_samples(since=clock.now())
    # A queue with no live job left may have no reading (queue_depths): the charts
    # read a queue missing from a sampled minute as empty.
    assert [(s.queue, s.count(JobState.Available)) for s in later] == [("mail", 3)]
    assert await store.queue_samples(since=start - timedelta(days=2)) == [*samples, *later]
