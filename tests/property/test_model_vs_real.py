"""Model-vs-real: the in-memory model and each Postgres engine must agree on everything.

A Hypothesis ``RuleBasedStateMachine`` applies the same operation to the in-memory
reference engine and to a Postgres engine that share one manual clock, and compares the
answers (acks, claims, counts, exceptions) and, after every step, the full normalized
state of both. Job ids differ between engines (Postgres sequences are not reset between
examples), so real ids are mapped to model ids in enqueue order.

The queue-storage engine also runs on a two-slot ring (``queue_storage_two_slot_ring``),
where ``turn_ring`` rotates and prunes both rings between any two steps: live attempts,
waiting callbacks and unclaimed rows are carried forward on nearly every turn, and the
model forgets exactly the terminal history prune dropped.

The machine drives every method of the storage port (``test_mvr_covers_the_port.py``
holds it to that). Its rules come in families, one mixin module each, over the shared
base of ``_mvr_base.py``: the worker, maintenance, callback and ring rules here, the admin
reads in ``_mvr_reads.py``, units of work and the operator and bulk operations in
``_mvr_ops.py``, unique conflict modes in ``_mvr_unique.py``, dependencies and stored
results in ``_mvr_deps.py``, batches' callbacks and counts in ``_mvr_job_batches.py``.
Some examples start from
failed jobs, a DLQ entry or a parked callback (``@initialize`` rules), which the 30 steps
of the default profile rarely reach.

Example counts come from the Hypothesis profile (``HYPOTHESIS_PROFILE=deep`` for a long
run); the step count per example is bounded here.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from awa.adapters.clock import ManualClock
from awa.domain.admin_views import QueueStateBucket
from awa.domain.callbacks import CallbackExpressions
from awa.domain.job import DlqEntry, JobRecord, QueueCounts, RunLease
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import Backoff
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.states import JobState
from awa.ports.maintenance import RingMaintenance
from awa.ports.storage import Ack, DlqFilter, JobFilter, StorageEngine
from tests.property._mvr_base import (
    EXPRESSIONS,
    KINDS,
    QUEUES,
    UNIQUE_KEYS,
    MachineBase,
    Outcome,
    Pair,
    _await,
    delays,
    job_specs,
)
from tests.property._mvr_batch import BatchBook, BatchRules, forget_batch_operations
from tests.property._mvr_deps import DependencyRules, _gone_without_a_word
from tests.property._mvr_job_batches import JobBatchRules
from tests.property._mvr_ops import OperatorRules
from tests.property._mvr_policies import PolicyRules
from tests.property._mvr_reads import ReadRules
from tests.property._mvr_unique import UniqueConflictRules
from tests.support.engines import CONTRACT_BACKOFF, ENGINES, EngineHandle, postgres_control

#: Every engine but the model itself: the Postgres engines, and the routing engine over
#: Postgres and over two in-memory engines (which needs no database).
REAL_ENGINES = sorted(name for name in ENGINES if name != "inmemory")


class ModelVsReal(
    # Each family of rules is a mixin of its own module (see tests/property/_mvr_base.py).
    ReadRules,
    OperatorRules,
    BatchRules,
    PolicyRules,
    UniqueConflictRules,
    DependencyRules,
    JobBatchRules,
    MachineBase,
):
    """The worker, maintenance, callback and ring rules, plus the state invariants; the
    admin reads, the operator and bulk operations and the batch operations come from
    the mixins."""

    def __init__(self) -> None:
        super().__init__()
        # batch operations submitted (neither engine's reset forgets them)
        self.batch = BatchBook()
        forget_batch_operations(self.p)

    # ------------------------------------------------------------------ producers
    @rule(
        kind=st.sampled_from(KINDS),
        queue=st.sampled_from(QUEUES),
        priority=st.integers(1, 4),
        max_attempts=st.integers(1, 3),
        run_in=st.none() | delays,
        unique=st.none() | st.sampled_from(UNIQUE_KEYS),
        count=st.integers(1, 3),
    )
    def enqueue(
        self,
        kind: str,
        queue: str,
        priority: int,
        max_attempts: int,
        run_in: float | None,
        unique: bytes | None,
        count: int,
    ) -> None:
        run_at = None if run_in is None else self.p.clock.now() + timedelta(seconds=run_in)
        specs = job_specs(
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            run_at=run_at,
            unique=unique,
            count=count,
        )
        model, real = self.p.run(lambda engine: engine.enqueue_many(specs))
        assert model.error == real.error, f"enqueue: model={model.error} real={real.error}"
        if model.error is None:
            self._map_jobs(model.value, real.value)
            assert self._norm(model.value, False) == self._norm(real.value, True)

    # ------------------------------------------------------------------ workers
    @rule(
        queue=st.sampled_from(QUEUES),
        limit=st.integers(0, 4),
        deadline=st.none() | st.sampled_from([10.0, 60.0]),
        aging=st.none() | st.sampled_from([30.0, 60.0]),
        rate=st.none() | st.sampled_from([GlobalRateLimit(1.0, 2), GlobalRateLimit(0.5, 1)]),
    )
    def claim(
        self,
        queue: str,
        limit: int,
        deadline: float | None,
        aging: float | None,
        rate: GlobalRateLimit | None,
    ) -> None:
        """With a fleet-wide rate limit (ADR 0029) the model and the real engine admit
        the same jobs: the limiter is the same arithmetic over the same clock, and the
        claim takes the first of the queue's order up to it."""
        model, real = self._same(
            lambda engine: engine.claim(
                queue,
                limit=limit,
                deadline=None if deadline is None else timedelta(seconds=deadline),
                aging_interval=None if aging is None else timedelta(seconds=aging),
                global_rate_limit=rate,
            ),
            label="claim",
        )
        if model.error is None:
            for model_claim, real_claim in zip(model.value, real.value, strict=True):
                self.leases.append((model_claim.lease, real_claim.lease))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._guarded(data, "heartbeat", lambda engine, lease: engine.heartbeat([lease]))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        self._guarded(data, "complete", lambda engine, lease: engine.complete([lease]))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), delay=st.none() | delays)
    def retry(self, data: st.DataObject, delay: float | None) -> None:
        wait = None if delay is None else timedelta(seconds=delay)
        self._guarded(
            data, "retry", lambda engine, lease: engine.retry(lease, error="boom", delay=wait)
        )

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), delay=delays)
    def snooze(self, data: st.DataObject, delay: float) -> None:
        wait = timedelta(seconds=delay)
        self._guarded(data, "snooze", lambda engine, lease: engine.snooze(lease, delay=wait))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def cancel_attempt(self, data: st.DataObject) -> None:
        self._guarded(
            data, "cancel_attempt", lambda engine, lease: engine.cancel_attempt(lease, reason="no")
        )

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        self._guarded(data, "fail", lambda engine, lease: engine.fail(lease, error="fatal"))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self._guarded(
            data, "release", lambda engine, lease: engine.release(lease, error="shutdown")
        )

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def update_progress(self, data: st.DataObject) -> None:
        percent = data.draw(st.integers(0, 100), label="percent")
        self._guarded(
            data,
            "update_progress",
            lambda engine, lease: engine.update_progress(
                lease, progress={"percent": percent}, metadata_updates={"step": percent}
            ),
        )

    @precondition(lambda self: any(m.lease > 1 for m, _ in self.leases))
    @rule(data=st.data())
    def finalize_stale(self, data: st.DataObject) -> None:
        """Complete with a lease one behind a later claim of the same job: always stale."""
        model_lease, real_lease = data.draw(
            st.sampled_from([pair for pair in self.leases if pair[0].lease > 1]), label="lease"
        )
        stale = iter(
            (
                RunLease(model_lease.job_id, model_lease.lease - 1),
                RunLease(real_lease.job_id, real_lease.lease - 1),
            )
        )
        self._same(lambda engine: engine.complete([next(stale)]), label="finalize_stale")

    # ------------------------------------------------------------------ maintenance
    @rule(seconds=delays)
    def advance_clock(self, seconds: float) -> None:
        self.p.clock.advance(timedelta(seconds=seconds))

    @rule(limit=st.integers(1, 5))
    def promote(self, limit: int) -> None:
        self._same(lambda engine: engine.promote_due(limit=limit), label="promote")

    @rule(staleness=st.sampled_from([30.0, 90.0]))
    def rescue(self, staleness: float) -> None:
        window = timedelta(seconds=staleness)
        self._same(
            lambda engine: engine.rescue_stale_heartbeats(staleness=window), label="rescue hb"
        )
        self._same(lambda engine: engine.rescue_expired_deadlines(), label="rescue deadline")

    @rule(completed=st.sampled_from([10.0, 100.0]), failed=st.sampled_from([50.0, 500.0]))
    def cleanup(self, completed: float, failed: float) -> None:
        self._same(
            lambda engine: engine.cleanup_retention(
                completed=timedelta(seconds=completed),
                failed=timedelta(seconds=failed),
                batch_size=2,
            ),
            label="cleanup",
        )

    # ------------------------------------------------------------------ callbacks
    @precondition(lambda self: bool(self.leases))
    @rule(
        data=st.data(),
        timeout=st.sampled_from([30.0, 3600.0]),
        expressions=st.sampled_from(EXPRESSIONS),
    )
    def wait_for_callback(
        self, data: st.DataObject, timeout: float, expressions: CallbackExpressions | None
    ) -> None:
        """Park an attempt on a callback (a long-lived waiting attempt the ring must
        carry along), with or without resolution expressions."""
        model_lease, real_lease = self._lease_pair(data)
        callback = f"cb-{model_lease.job_id}-{model_lease.lease}"
        leases = iter((model_lease, real_lease))

        async def park(engine: StorageEngine, lease: RunLease) -> tuple[Ack, Ack | None]:
            window = timedelta(seconds=timeout)
            registered = await engine.register_callback(
                lease, callback_id=callback, timeout=window, expressions=expressions
            )
            if registered != Ack.APPLIED:
                return registered, None
            return registered, await engine.wait_for_callback(lease)

        self._same(lambda engine: park(engine, next(leases)), label="wait_for_callback")
        if callback not in self.callbacks:
            self.callbacks.append(callback)

    @precondition(lambda self: bool(self.callbacks))
    @rule(data=st.data(), action=st.sampled_from(["complete", "fail", "resume"]))
    def resolve_callback(self, data: st.DataObject, action: str) -> None:
        callback = data.draw(st.sampled_from(self.callbacks), label="callback")
        self._same(
            lambda engine: engine.resolve_callback(
                callback,
                action=action,
                payload={"ok": True} if action == "resume" else None,
                error="external" if action == "fail" else None,
            ),
            label=f"resolve_callback {action}",
        )

    @rule()
    def rescue_callbacks(self) -> None:
        self._same(lambda engine: engine.rescue_expired_callbacks(), label="rescue callbacks")

    # ------------------------------------------------------------------ ring upkeep
    @precondition(lambda self: isinstance(self.p.real.engine, RingMaintenance))
    @rule(failed_retention=st.sampled_from([5.0, 1000.0]), turns=st.integers(1, 3))
    def turn_ring(self, failed_retention: float, turns: int) -> None:
        """Rotate and prune both rings of the real engine (the model has none). Prune
        must leave every job it keeps exactly as it was, live ones included (carried
        forward), and drop only terminal history: completed, cancelled, and failed
        before ``failed_retention``. The model then forgets the same jobs."""
        real = self.p.real.engine
        assert isinstance(real, RingMaintenance)

        def listed() -> list[JobRecord]:
            return self.p.runner.run(
                _await(self.p.real.engine.list_jobs(JobFilter(), limit=100_000))
            )

        before = {job.id: job for job in listed()}
        retention = timedelta(seconds=failed_retention)
        for _ in range(turns):
            self.p.runner.run(_await(real.prune(failed_retention=retention)))
            self.p.runner.run(_await(real.rotate()))
            self.p.runner.run(_await(real.prune_leases()))
            self.p.runner.run(_await(real.rotate_leases()))
        after = {job.id: job for job in listed()}
        assert set(after) <= set(before), "prune made up jobs"
        for job_id, job in after.items():
            assert job == before[job_id], f"prune changed job {job_id}"
        floor = self.p.clock.now() - retention
        gone = sorted(set(before) - set(after))
        for job_id in gone:
            job = before[job_id]
            assert job.state in (JobState.Completed, JobState.Cancelled) or (
                job.state == JobState.Failed
                and job.finalized_at is not None
                and job.finalized_at <= floor
            ), f"prune dropped {job.state} job {job_id}"
        if gone:
            # Prune drops a finished job without answering a child that still waits on
            # it (a parent a kind rule's effect finished: ADR 0028); the leader's search
            # for vanished parents answers that child later. The model drops such a job
            # the same way, and deletes the rest as the engine's delete does.
            waited_on = self._waited_on()
            model_ids = [self._mid(job_id) for job_id in gone]
            silent = [job_id for job_id in model_ids if job_id in waited_on]
            for job_id in silent:
                assert self.p.runner.run(_await(_gone_without_a_word(self.p.model, job_id)))
            rest = [job_id for job_id in model_ids if job_id not in waited_on]
            deleted = self.p.runner.run(_await(self.p.model.engine.delete_jobs(rest)))
            assert deleted == len(rest)

    # ------------------------------------------------------------------ operators
    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def cancel_job(self, data: st.DataObject) -> None:
        self._by_id(data, "cancel_job", lambda engine, job_id: engine.cancel_job(job_id))

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def retry_job(self, data: st.DataObject) -> None:
        self._by_id(data, "retry_job", lambda engine, job_id: engine.retry_job(job_id))

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def move_to_dlq(self, data: st.DataObject) -> None:
        self._by_id(
            data,
            "move_failed_to_dlq",
            lambda engine, job_id: engine.move_failed_to_dlq(job_id, reason="manual"),
        )

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def retry_from_dlq(self, data: st.DataObject) -> None:
        self._by_id(data, "retry_from_dlq", lambda engine, job_id: engine.retry_from_dlq(job_id))

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def pause(self, queue: str, paused: bool) -> None:
        if paused:
            self._same(lambda engine: engine.pause_queue(queue, paused_by="ops"), label="pause")
        else:
            self._same(lambda engine: engine.resume_queue(queue), label="resume")

    @rule(queue=st.sampled_from(QUEUES), enabled=st.booleans())
    def set_dlq(self, queue: str, enabled: bool) -> None:
        self._same(lambda engine: engine.set_queue_dlq(queue, enabled=enabled), label="set_dlq")

    @rule(queue=st.sampled_from(QUEUES))
    def drain(self, queue: str) -> None:
        self._same(lambda engine: engine.drain_queue(queue), label="drain")

    # ------------------------------------------------------------------ observations
    @invariant()
    def engines_agree(self) -> None:
        """After every step both engines hold the same jobs, queue counts and DLQ; each
        engine's counters equal a recount of the jobs it lists; every state is known. One
        reading of each engine serves every check."""
        model, real = self.p.run(_reading)
        assert model.error is None and real.error is None, (model.error, real.error)
        model_jobs, model_counts, model_dlq, model_dead, model_dlq_minutes = model.value
        real_jobs, real_counts, real_dlq, real_dead, real_dlq_minutes = real.value
        assert all(isinstance(job.state, JobState) for job in model_jobs)
        assert sorted(self._norm(model_jobs, False), key=_by_id) == sorted(
            self._norm(real_jobs, True), key=_by_id
        )
        self._assert_same(Outcome(model_counts), Outcome(real_counts), label="queue_counts")
        self._assert_same(Outcome(model_dlq), Outcome(real_dlq), label="list_dlq")
        # The DLQ's jobs as list_jobs would show them, newest first, and its failures per
        # minute (the dashboard's chart).
        self._assert_same(Outcome(model_dead), Outcome(real_dead), label="list_dead_lettered")
        self._assert_same(
            Outcome(model_dlq_minutes), Outcome(real_dlq_minutes), label="dlq_by_minute"
        )
        _counters_equal_a_recount("model", model_counts, model_jobs)
        _counters_equal_a_recount("real", real_counts, real_jobs)


Reading = tuple[
    list[JobRecord], list[QueueCounts], list[DlqEntry], list[JobRecord], list[QueueStateBucket]
]


async def _reading(engine: StorageEngine) -> Reading:
    """Everything an engine holds: its jobs, queue counts and DLQ entries, the DLQ's jobs
    and its failures per minute over the last hour."""
    jobs = await engine.list_jobs(JobFilter(), limit=100_000)
    counts = await engine.queue_counts()
    dlq = await engine.list_dlq(DlqFilter(), limit=1000)
    dead = await engine.list_dead_lettered(JobFilter(), limit=1000)
    return jobs, counts, dlq, dead, await engine.dlq_by_minute(window=timedelta(hours=1))


def _by_id(job: dict[str, Any]) -> int:
    return int(job["id"])


def _counters_equal_a_recount(
    label: str, counted: list[QueueCounts], jobs: list[JobRecord]
) -> None:
    """An engine's counters (``queue_counts()``, folded from counter rows on queue storage)
    never go negative and equal a recount of the jobs it lists."""
    recount = Counter((job.queue, job.state) for job in jobs)
    queues = {c.queue for c in counted} | {queue for queue, _ in recount}
    by_queue = {c.queue: c.counts for c in counted}
    for queue in queues:
        counts = by_queue.get(queue, {})
        for state in JobState:
            n = counts.get(state, 0)
            assert n >= 0, f"{label}: {queue} {state.sql_name} counter is {n}"
            assert n == recount[(queue, state)], (
                f"{label}: {queue} {state.sql_name} counter {n}, recount {recount[(queue, state)]}"
            )


SMALL_RING = "queue_storage_two_slot_ring"


@asynccontextmanager
async def _two_slot_ring(
    clock: ManualClock, backoff: Backoff, database_url: str | None
) -> AsyncIterator[EngineHandle]:
    """Queue storage with two queue slots and two lease slots: every rotation makes the
    slot just sealed the next prune target, so live work is carried on nearly every
    ``turn_ring``."""
    from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage

    assert database_url is not None
    await install_queue_storage(database_url, "qs_model", queue_slot_count=2, lease_slot_count=2)
    policies = KindPolicies()
    engine = await QueueStorageEngine.open(
        database_url, clock=clock, backoff=backoff, schema="qs_model", policies=policies
    )
    try:
        async with postgres_control(database_url, clock) as control:
            yield EngineHandle(
                SMALL_RING,
                engine,
                clock,
                engine,
                engine.leader_lock,
                control,
                policies=policies,
            )
    finally:
        await engine.close()


#: Engines whose run is split into this many test items, each taking its share of the
#: examples: the total is the same, no item runs for minutes on a busy host (the whole
#: run of postgres_queue_storage took 325 s at load 18, past the 300 s limit) and
#: pytest-xdist spreads the parts over its workers. Measured on one run: the two
#: Postgres engines cost about three times the others, these four about twice.
PARTS = {
    "postgres_canonical": 4,
    # Each Postgres pair runs 25 examples (_share), so five parts of five. In four parts
    # postgres_queue_storage took 8.6-10.0 s a part, in three parts the routing engines
    # over queue storage 8.4-14.2 s, on a quiet host (2026-12-07, issue 42).
    "postgres_queue_storage": 5,
    "routing_queue_storage_pooled": 5,
    "routing_mixed": 5,
    "routing_queue_storage": 5,
    "routing_canonical": 3,
    # Routing over in-memory engines runs all 100 examples: in one item 13.6-15.3 s.
    "routing_inmemory_active": 4,
    "routing_inmemory_canonical": 4,
    "routing_inmemory_mixed_transition": 4,
    # 24 examples: 7.4 and 8.0 s in two parts.
    SMALL_RING: 3,
}


def _pair_params() -> list[object]:
    params: list[object] = []
    for name in [*REAL_ENGINES, SMALL_RING]:
        marks = [pytest.mark.postgres] if name == SMALL_RING or ENGINES[name].needs_database else []
        # a derandomized profile would run the same examples in every part
        parts = 1 if settings().derandomize else PARTS.get(name, 1)
        for part in range(parts):
            label = name if parts == 1 else f"{name}-part{part + 1}of{parts}"
            params.append(pytest.param((name, parts), marks=marks, id=label))
    return params


@pytest.fixture(params=_pair_params())
def engine_pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    name, _parts = request.param
    clock = ManualClock()
    factory = _two_slot_ring if name == SMALL_RING else ENGINES[name].factory
    needs_database = name == SMALL_RING or ENGINES[name].needs_database
    migrated_database_url: str | None = (
        request.getfixturevalue("migrated_database_url") if needs_database else None
    )
    with asyncio.Runner() as runner:
        stack = AsyncExitStack()
        model = runner.run(
            stack.enter_async_context(ENGINES["inmemory"].factory(clock, CONTRACT_BACKOFF, None))
        )
        real = runner.run(
            stack.enter_async_context(factory(clock, CONTRACT_BACKOFF, migrated_database_url))
        )
        try:
            yield Pair(runner, model, real)
        finally:
            runner.run(stack.aclose())


def _steps(current: settings) -> int:
    """Steps per example: ``AWA_MODEL_STEPS``, else the profile's count under ``deep``, else 30."""
    explicit = os.environ.get("AWA_MODEL_STEPS")
    if explicit:
        return int(explicit)
    if os.environ.get("HYPOTHESIS_PROFILE") == "deep":
        return current.stateful_step_count
    return 30


def _share(pair: Pair) -> int:
    """The default profile's fraction (1/n) of the examples for this pair (``deep`` takes
    them all): a quarter for every pair on Postgres, which keeps each test item under 10 s
    on a quiet host (issue 42); routing over in-memory engines is cheap and takes them all."""
    name = pair.real.name
    return 4 if name == SMALL_RING or ENGINES[name].needs_database else 1


def test_model_and_real_engine_agree(engine_pair: Pair, request: pytest.FixtureRequest) -> None:
    machine = type("BoundModelVsReal", (ModelVsReal,), {"pair": engine_pair})
    _, parts = request.node.callspec.params["engine_pair"]
    current = settings()
    run_state_machine_as_test(
        machine,
        settings=settings(
            current,
            stateful_step_count=_steps(current),
            # the deep profile's example count is sized for pure properties; a thousand
            # full-length examples against a real database is the deep run here
            max_examples=max(
                1,
                min(current.max_examples, 1000)
                # the default run takes a share of them (_share), the deep run all of them;
                # routing over in-memory engines is cheap and takes them all
                // (1 if os.environ.get("HYPOTHESIS_PROFILE") == "deep" else _share(engine_pair))
                # this item's part of them (PARTS)
                // parts,
            ),
            deadline=None,
        ),
    )
