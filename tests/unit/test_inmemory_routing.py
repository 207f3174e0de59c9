"""routing(inmemory, inmemory) through a whole transition: the in-memory store shares ids,
unique claims and the DLQ between its engines, the in-memory transition state takes the
operators' steps through the domain's gates, and the routing engine follows it as it
follows the Postgres one (``tests/integration/test_transition.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory.store import CANONICAL_SIDE, queue_storage_side
from awa.domain.cron import CronSchedule
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from awa.domain.transition import (
    Gate,
    RuntimeView,
    StorageCapability,
    TransitionRefused,
    TransitionRole,
    TransitionState,
)
from awa.entrypoints.routing import InMemoryRouting, inmemory_routing
from awa.ports.storage import Ack, DlqFilter, JobFilter

pytestmark = pytest.mark.anyio

QS_RUNTIME = RuntimeView(StorageCapability.QUEUE_STORAGE, live=True)
QUEUE_STORAGE = queue_storage_side("awa")


@pytest.fixture
async def routing() -> AsyncIterator[InMemoryRouting]:
    built = inmemory_routing(ManualClock(datetime(2030, 1, 1, tzinfo=UTC)))
    try:
        yield built
    finally:
        await built.engine.close()


def side_of(routing: InMemoryRouting, job_id: int) -> str:
    (side,) = [name for name, jobs in routing.store.state.sides.items() if job_id in jobs]
    return side


def mixed(routing: InMemoryRouting) -> None:
    routing.transition.prepare()
    routing.transition.enter_mixed_transition([QS_RUNTIME])


async def test_producers_follow_the_state_and_claims_drain_canonical_first(
    routing: InMemoryRouting,
) -> None:
    engine = routing.engine
    (old,) = await engine.enqueue_many([JobSpec(kind="k", args={"n": 1})])
    (keyed,) = await engine.enqueue_many([JobSpec(kind="k", unique_key=b"same")])
    mixed(routing)
    assert (await engine.status()).state is TransitionState.MIXED_TRANSITION
    (new,) = await engine.enqueue_many([JobSpec(kind="k", args={"n": 2})])
    # Unique claims are shared: a key held on canonical refuses the queue-storage insert.
    with pytest.raises(UniqueConflict):
        await engine.enqueue_many([JobSpec(kind="k", unique_key=b"same")])
    skipped = await engine.enqueue_many_skip_duplicates(
        [JobSpec(kind="k", unique_key=b"same"), JobSpec(kind="k", args={"n": 3})]
    )
    assert [job.args for job in skipped] == [{"n": 3}]
    assert [side_of(routing, j.id) for j in (old, keyed, new, skipped[0])] == [
        CANONICAL_SIDE,
        CANONICAL_SIDE,
        QUEUE_STORAGE,
        QUEUE_STORAGE,
    ]
    # One id sequence for both engines.
    assert [old.id, keyed.id, new.id, skipped[0].id] == [1, 2, 3, 4]
    claims = await engine.claim("default", limit=10)
    assert [c.job.id for c in claims] == [old.id, keyed.id, new.id, skipped[0].id]
    assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 4
    listed = await engine.list_jobs(JobFilter())
    assert [j.id for j in listed] == [4, 3, 2, 1]
    assert all(j.state is JobState.Completed for j in listed)


async def test_a_drain_only_runtime_claims_canonical_only(routing: InMemoryRouting) -> None:
    engine = routing.engine
    mixed(routing)
    await engine.enqueue_many([JobSpec(kind="k")])
    status = await engine.bind_transition_role(TransitionRole.CANONICAL_DRAIN)
    assert status.state is TransitionState.MIXED_TRANSITION
    assert engine.storage_capability == "canonical_drain_only"
    assert await engine.claim("default", limit=10) == []
    await engine.bind_transition_role(TransitionRole.AUTO)
    assert len(await engine.claim("default", limit=10)) == 1


async def test_promotion_moves_the_waiting_canonical_backlog_and_finalize_waits_for_it(
    routing: InMemoryRouting,
) -> None:
    engine = routing.engine
    canonical = engine.canonical
    (waiting,) = await engine.enqueue_many(
        [JobSpec(kind="k", run_at=datetime(2030, 1, 2, tzinfo=UTC), unique_key=b"kept")]
    )
    (running,) = await engine.enqueue_many([JobSpec(kind="k", queue="busy")])
    (claim,) = await engine.claim("busy", limit=1)
    mixed(routing)
    # Nothing moves before promotion runs; finalize is refused while canonical has work.
    with pytest.raises(TransitionRefused) as refused:
        routing.transition.finalize()
    assert refused.value.gate is Gate.CANONICAL_BACKLOG_DRAINED
    assert await engine.promote_due() == 1  # the scheduled job moved (not yet due)
    assert side_of(routing, waiting.id) == QUEUE_STORAGE
    assert await canonical.get_job(waiting.id) is None
    moved = await engine.get_job(waiting.id)
    assert moved is not None and moved.state is JobState.Scheduled
    # It keeps its unique key across the move.
    with pytest.raises(UniqueConflict):
        await engine.enqueue_many([JobSpec(kind="k", unique_key=b"kept")])
    # The running canonical attempt still finishes on canonical; then finalize passes.
    assert side_of(routing, running.id) == CANONICAL_SIDE
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert routing.transition.finalize().state is TransitionState.ACTIVE
    assert [j.id for j in await engine.list_jobs(JobFilter())] == [running.id, waiting.id]


async def test_abort_is_refused_once_queue_storage_holds_a_job(routing: InMemoryRouting) -> None:
    mixed(routing)
    assert routing.transition.abort().state is TransitionState.CANONICAL
    mixed(routing)
    await routing.engine.enqueue_many([JobSpec(kind="k")])
    with pytest.raises(TransitionRefused) as refused:
        routing.transition.abort()
    assert refused.value.gate is Gate.NO_QUEUE_STORAGE_ROWS


async def test_enter_mixed_needs_a_live_queue_storage_runtime(routing: InMemoryRouting) -> None:
    routing.transition.prepare()
    with pytest.raises(TransitionRefused) as refused:
        routing.transition.enter_mixed_transition([])
    assert refused.value.gate is Gate.LIVE_QUEUE_STORAGE_RUNTIME


async def test_only_a_fresh_store_goes_straight_to_active(routing: InMemoryRouting) -> None:
    await routing.engine.enqueue_many([JobSpec(kind="k")])
    assert not await routing.transition.activate_if_fresh()
    status = await routing.engine.bind_transition_role("auto")
    assert status.state is TransitionState.CANONICAL
    fresh = inmemory_routing(ManualClock())
    try:
        status = await fresh.engine.bind_transition_role("auto")
        assert status.state is TransitionState.ACTIVE
        (job,) = await fresh.engine.enqueue_many([JobSpec(kind="k")])
        assert side_of(fresh, job.id) == QUEUE_STORAGE
    finally:
        await fresh.engine.close()


async def test_a_cron_fire_lands_where_producers_write(routing: InMemoryRouting) -> None:
    engine, cron = routing.engine, routing.control.cron
    await cron.upsert_cron_jobs(
        [CronSchedule(name="nightly", cron_expr="0 3 * * *", kind="report")]
    )
    first = await cron.trigger_cron_job("nightly")
    assert first is not None and side_of(routing, first.id) == CANONICAL_SIDE
    mixed(routing)
    fired = await cron.fire_cron_job(
        "nightly", fire_at=datetime(2030, 1, 1, 3, tzinfo=UTC), previous=None
    )
    assert fired is not None and side_of(routing, fired.id) == QUEUE_STORAGE
    assert (await engine.get_job(fired.id)) == fired


async def test_a_failed_skip_inside_a_transaction_keeps_the_rest(
    routing: InMemoryRouting,
) -> None:
    engine = routing.engine
    mixed(routing)
    await engine.enqueue_many([JobSpec(kind="k", unique_key=b"held")])
    inserted = await engine.enqueue_many_skip_duplicates(
        [JobSpec(kind="a"), JobSpec(kind="b", unique_key=b"held"), JobSpec(kind="c")]
    )
    assert [job.kind for job in inserted] == ["a", "c"]
    kinds = sorted(job.kind for job in await engine.list_jobs(JobFilter()))
    assert kinds == ["a", "c", "k"]


async def test_the_dlq_follows_the_producers_engine(routing: InMemoryRouting) -> None:
    engine = routing.engine
    await engine.set_queue_dlq("default", enabled=True)
    (job,) = await engine.enqueue_many([JobSpec(kind="k", max_attempts=1)])
    (claim,) = await engine.claim("default", limit=1)
    assert await engine.fail(claim.lease, error="boom") == Ack.APPLIED
    mixed(routing)
    # The canonical engine wrote the entry; the queue-storage engine reads and retries it.
    assert [e.job.id for e in await engine.list_dlq(DlqFilter())] == [job.id]
    retried = await engine.retry_from_dlq(job.id)
    assert retried is not None and retried.state is JobState.Available
    assert side_of(routing, job.id) == QUEUE_STORAGE
    assert await engine.dlq_depth() == 0


async def test_observing_the_transition_counts_the_canonical_backlog_only_while_it_gates(
    routing: InMemoryRouting,
) -> None:
    engine = routing.engine
    await engine.enqueue_many([JobSpec(kind="k"), JobSpec(kind="k")])
    observed = await engine.observe_transition()
    assert observed.status.state is TransitionState.CANONICAL
    assert observed.canonical_backlog is None and observed.schema_installed
    mixed(routing)
    (claim,) = await engine.claim("default", limit=1)
    await engine.complete([claim.lease])
    observed = await engine.observe_transition()
    assert observed.status.state is TransitionState.MIXED_TRANSITION
    assert observed.canonical_backlog == 1


async def test_the_cached_state_ages_on_the_engines_clock() -> None:
    # The claim paths trust the state read for ``refresh_interval`` seconds of the
    # clock the engine was built with, not of the host's.
    clock = ManualClock()
    built = inmemory_routing(clock, refresh_interval=5.0)
    try:
        assert (await built.engine.status()).state is TransitionState.CANONICAL
        built.transition.prepare()
        clock.advance(4.9)
        assert (await built.engine.status()).state is TransitionState.CANONICAL
        clock.advance(0.1)
        assert (await built.engine.status()).state is TransitionState.PREPARED
    finally:
        await built.engine.close()
