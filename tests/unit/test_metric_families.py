"""The metric families beyond the per-attempt counters, recorded with the SDK's in-memory
reader: DLQ moves by rescue, descriptor info gauges, the storage-transition gauges, cheap
queue depth, and how bulk inserts are attributed."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.descriptors import Descriptor
from awa.domain.errors import TerminalError
from awa.domain.job import JobSpec
from awa.domain.policies import NO_JITTER
from awa.domain.states import JobState
from awa.domain.transition import (
    StorageCapability,
    TransitionObservation,
    TransitionState,
    TransitionStatus,
)
from awa.entrypoints.routing import inmemory_control_plane
from awa.ports.descriptors import DeclaredDescriptor
from awa.ports.storage import TransitionObserver
from awa.runtime import AttemptContext, HandlerRegistry, metrics
from awa.runtime.descriptors import DescriptorService
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance import MaintenanceLeader
from awa.runtime.queue_gauges import QueueGauges, storage_points
from tests.support.otel import recording
from tests.unit.test_runtime_support import (
    enqueue,
    fast_config,
    job,
    make_engine,
    on_clock,
    running,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

QUEUE = "awa.job.queue"
KIND = "awa.job.kind"


async def test_a_rescue_into_the_dlq_counts_as_dlq_moved() -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    await engine.set_queue_dlq("held", enabled=True)
    await enqueue(engine, "lost", queue="held", max_attempts=1)
    await enqueue(engine, "lost", queue="plain", max_attempts=1)
    assert len(await engine.claim("held", limit=1)) == 1
    assert len(await engine.claim("plain", limit=1)) == 1
    clock.advance(timedelta(minutes=10))
    handlers = HandlerRegistry()
    handlers.register("lost", lambda ctx: None, queue="held")
    config = fast_config(handlers, queues=[("held", 1), ("plain", 1)])
    with recording() as recorder:
        leader = MaintenanceLeader(engine, engine.leader_lock(), config, InFlight(), clock=clock)
        async with on_clock(clock):
            with clock.move_on_after(0.5):
                await leader.run()
        rescues = recorder.total("awa.maintenance.rescues", {"awa.rescue.reason": "heartbeat"})
        moved = recorder.points("awa.job.dlq_moved")
    assert rescues == 2
    # Only the queue with the DLQ enabled moved its exhausted job there.
    assert moved == {
        frozenset(
            {(QUEUE, "held"), (KIND, "lost"), ("awa.dlq.reason", "max_attempts_exhausted")}
        ): 1
    }


async def test_a_worker_failure_into_the_dlq_counts_as_dlq_moved_with_its_reason() -> None:
    """The engine, not the worker, decides that a job's last failure goes into the DLQ;
    the counter must still see it, with the reason, and only for queues with the DLQ."""
    engine = make_engine()
    await engine.set_queue_dlq("held", enabled=True)

    def terminal(ctx: AttemptContext) -> None:
        raise TerminalError("bad input")

    def flaky(ctx: AttemptContext) -> None:
        raise RuntimeError("still broken")

    handlers = HandlerRegistry()
    handlers.register("terminal", terminal, queue="held")
    handlers.register("flaky", flaky, queue="held")
    handlers.register("plain_terminal", terminal, queue="plain")
    jobs = [
        *await enqueue(engine, "terminal", queue="held"),
        *await enqueue(engine, "flaky", queue="held", max_attempts=1),
        *await enqueue(engine, "plain_terminal", queue="plain"),
        *await enqueue(engine, "mistyped", queue="held"),
        # A retried attempt that is not the last moves nothing.
        *await enqueue(engine, "flaky", queue="held", max_attempts=5),
    ]
    config = fast_config(handlers, queues=[("held", 2), ("plain", 1)])
    with recording() as recorder:
        async with running(engine, handlers, config):

            async def settled() -> bool:
                dlq = await engine.dlq_depth("held")
                plain = await job(engine, jobs[2].id)
                retried = await job(engine, jobs[4].id)
                return dlq == 3 and plain.state is JobState.Failed and retried.attempt >= 1

            await wait_until(settled, timeout=10)
        moved = recorder.points("awa.job.dlq_moved")

    def key(kind: str, reason: str) -> frozenset[tuple[str, str]]:
        return frozenset({(QUEUE, "held"), (KIND, kind), ("awa.dlq.reason", reason)})

    assert moved == {
        key("terminal", "terminal_error"): 1,
        key("flaky", "max_attempts_exhausted"): 1,
        key("mistyped", "terminal_error"): 1,
    }


async def test_declared_descriptors_are_reported_as_info_gauges() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()

    async def ok(ctx: AttemptContext) -> None:
        return None

    handlers.register("send_email", ok, queue="email")
    control = inmemory_control_plane(engine, engine._clock)
    descriptors = DescriptorService(
        control.descriptors,
        engine._clock,
        queues=[
            DeclaredDescriptor(
                "email",
                Descriptor(display_name="Outbound email", owner="growth", tags=("a", "b")),
                "h1",
            )
        ],
        kinds=[DeclaredDescriptor("send_email", Descriptor(description="Sends one"), "h2")],
    )
    with recording() as recorder:
        config = fast_config(handlers, queues=[("email", 1)])
        async with running(engine, handlers, config, descriptors=descriptors, control=control):
            queue_info = recorder.points("awa.queue.info")
            kind_info = recorder.points("awa.job_kind.info")
        after = recorder.points("awa.queue.info")
    assert queue_info == {
        frozenset(
            {
                (QUEUE, "email"),
                ("awa.queue.display_name", "Outbound email"),
                ("awa.queue.owner", "growth"),
                ("awa.queue.tags", "a,b"),
            }
        ): 1
    }
    assert kind_info == {
        frozenset({(KIND, "send_email"), ("awa.job_kind.description", "Sends one")}): 1
    }
    assert after == {}  # a stopped runtime declares nothing any more


async def test_bulk_inserts_count_skipped_unique_jobs_only_where_they_can_tell() -> None:
    free = JobSpec(kind="a", queue="q1")
    keyed = [JobSpec(kind="b", queue="q2", unique_key=bytes([n])) for n in range(3)]
    with recording() as recorder:
        metrics.count_inserted_copy([free, *keyed], 3)  # one keyed job was skipped
        assert recorder.total("awa.job.inserted", {QUEUE: "q1", KIND: "a"}) == 1
        assert recorder.total("awa.job.inserted", {QUEUE: "q2", KIND: "b"}) == 2
    mixed = [
        JobSpec(kind="b", queue="q2", unique_key=b"x"),
        JobSpec(kind="c", queue="q2", unique_key=b"y"),
    ]
    with recording() as recorder:
        metrics.count_inserted_copy(mixed, 1)
        # The kinds differ, so the one inserted job is counted under its queue only.
        assert recorder.points("awa.job.inserted") == {frozenset({(QUEUE, "q2")}): 1}
    # With the inserted records at hand, the skipped spec is known by its key.
    engine = make_engine()
    await engine.enqueue_many([mixed[0]])
    records = await engine.enqueue_many_skip_duplicates(mixed)
    with recording() as recorder:
        metrics.count_inserted_of(mixed, records)
        assert recorder.points("awa.job.inserted") == {frozenset({(QUEUE, "q2"), (KIND, "c")}): 1}


class _ObservedEngine(InMemoryEngine):
    """The in-memory engine plus a scripted transition observation."""

    def __init__(self, observation: TransitionObservation) -> None:
        super().__init__(clock=ManualClock(), backoff=NO_JITTER)
        self.observation = observation

    async def observe_transition(self) -> TransitionObservation:
        return self.observation


def _mixed(backlog: int) -> TransitionObservation:
    status = TransitionStatus(
        current_engine="canonical",
        active_engine="canonical",
        prepared_engine="queue_storage",
        state=TransitionState.MIXED_TRANSITION,
    )
    return TransitionObservation(
        status=status,
        canonical_backlog=backlog,
        schema_installed=True,
        live_runtimes={StorageCapability.QUEUE_STORAGE: 2},
    )


def _ready(observation: TransitionObservation) -> dict[str, float]:
    points = storage_points(observation)["awa.storage.transition_ready"]
    return {dict(key)["awa.storage.action"]: value for value, key in points}


def test_transition_readiness_follows_the_transition_gates() -> None:
    assert _ready(_mixed(3)) == {"enter_mixed_transition": 0, "finalize": 0}
    assert _ready(_mixed(0)) == {"enter_mixed_transition": 0, "finalize": 1}
    prepared = TransitionObservation(
        status=TransitionStatus(prepared_engine="queue_storage", state=TransitionState.PREPARED),
        canonical_backlog=5,
        schema_installed=True,
        live_runtimes={StorageCapability.QUEUE_STORAGE: 1},
    )
    assert _ready(prepared) == {"enter_mixed_transition": 1, "finalize": 0}
    blocked = attrs.evolve(prepared, live_runtimes={StorageCapability.CANONICAL: 1})
    assert _ready(blocked)["enter_mixed_transition"] == 0
    unbuilt = attrs.evolve(prepared, schema_installed=False)
    assert _ready(unbuilt)["enter_mixed_transition"] == 0


async def test_the_leader_reports_the_storage_gauges() -> None:
    engine = _ObservedEngine(_mixed(4))
    assert isinstance(engine, TransitionObserver)
    with recording() as recorder:
        gauges = QueueGauges(engine, _current(), clock=engine._clock)
        gauges.attach()
        await gauges.refresh()
        assert recorder.points("awa.storage.state") == {
            frozenset(
                {
                    ("awa.storage.state", "mixed_transition"),
                    ("awa.storage.current_engine", "canonical"),
                    ("awa.storage.active_engine", "canonical"),
                    ("awa.storage.prepared_engine", "queue_storage"),
                }
            ): 1
        }
        ready = recorder.points("awa.storage.transition_ready")
        assert ready[frozenset({("awa.storage.action", "finalize")})] == 0
        assert recorder.points("awa.storage.canonical_live_backlog") == {frozenset(): 4}
        live = recorder.points("awa.storage.live_runtime_capability")
        assert live[frozenset({("awa.storage.capability", "queue_storage")})] == 2
        assert live[frozenset({("awa.storage.capability", "canonical")})] == 0
        engine.observation = _mixed(0)
        await gauges.refresh()
        ready = recorder.points("awa.storage.transition_ready")
        assert ready[frozenset({("awa.storage.action", "finalize")})] == 1
        gauges.detach()
        assert recorder.points("awa.storage.state") == {}


async def test_queue_depth_reports_zeros_once_a_queue_empties() -> None:
    engine = make_engine()
    [record] = await enqueue(engine, "k", queue="mail")
    with recording() as recorder:
        gauges = QueueGauges(engine, _current(), clock=engine._clock)
        gauges.attach()
        await gauges.refresh()
        available = frozenset({(QUEUE, "mail"), ("awa.job.state", "available")})
        assert recorder.points("awa.queue.depth")[available] == 1
        assert recorder.points("awa.storage.state") == {}  # no transition to observe here
        await engine.cancel_job(record.id)
        await gauges.refresh()
        assert recorder.points("awa.queue.depth")[available] == 0
        assert recorder.points("awa.queue.lag")[frozenset({(QUEUE, "mail")})] == 0


def _current() -> metrics.Instruments:
    found = metrics.instruments()
    assert found is not None
    return found


class _FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_histogram_sampling_keeps_a_burst_within_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeMonotonic()
    monkeypatch.setattr("awa.runtime.metrics.time.monotonic", clock)
    sampler = metrics._Sampler()
    clock.now += 60.0  # a quiet minute, then a burst of 20,000 calls/s for 2 s
    taken = 0
    for _ in range(40_000):
        clock.now += 1 / 20_000
        taken += sampler.take()
    # About HISTOGRAM_BUDGET a second, plus at most two checks' worth at the start (the
    # first check still sees the quiet minute).
    assert taken <= 2 * metrics.HISTOGRAM_BUDGET + 3 * metrics._SAMPLES_PER_CHECK
    assert taken >= metrics.HISTOGRAM_BUDGET


def test_histogram_sampling_takes_every_call_at_a_low_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _FakeMonotonic()
    monkeypatch.setattr("awa.runtime.metrics.time.monotonic", clock)
    sampler = metrics._Sampler()
    taken = 0
    for _ in range(500):
        clock.now += 0.01  # 100 calls a second, under the budget
        taken += sampler.take()
    assert taken == 500
