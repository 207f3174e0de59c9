"""Model-vs-real rules for units of work, the skip-duplicates insert, striped claims and
worker warm-up, callback heartbeats, and the operator and bulk operations (by unique
key, on failed jobs, on the DLQ)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from awa.domain.callbacks import CallbackExpressions
from awa.domain.job import Claim, JobRecord, JobSpec, RunLease
from awa.domain.stripes import stripe_queues
from awa.domain.transition import producers_use_queue_storage
from awa.ports.storage import (
    Ack,
    DlqFilter,
    JobFilter,
    StorageEngine,
    StripedClaimer,
    TransitionObserver,
    WorkerWarmUp,
)
from tests.property._mvr_base import (
    EXPRESSIONS,
    KINDS,
    QUEUES,
    UNIQUE_KEYS,
    MachineBase,
    delays,
    job_specs,
)

#: The physical name of stripe 1 of ``beta`` (with two or more stripes): a striped claim
#: of that stripe on queue storage finds the jobs inserted here.
STRIPE_QUEUE = "beta#1"

#: Where the producer rules of this module insert: the machine's queues and one stripe.
INSERT_QUEUES = (*QUEUES, STRIPE_QUEUE)

kinds = st.none() | st.sampled_from(KINDS)
queues = st.none() | st.sampled_from(QUEUES)
reasons = st.sampled_from(["manual", "audit"])


class _RolledBack(Exception):
    """Raised inside a unit of work to roll it back; carries what was seen in it."""

    def __init__(self, seen: Any) -> None:
        super().__init__("rolled back")
        self.seen = seen


def _failing(pair: tuple[RunLease, RunLease]) -> Callable[[StorageEngine], Awaitable[Ack]]:
    """Fail the model's lease of ``pair`` on the model, then the real one on the real."""
    leases = iter(pair)
    return lambda engine: engine.fail(next(leases), error="seeded")


class OperatorRules(MachineBase):
    # ------------------------------------------------------------------ start
    @initialize(failed=st.integers(0, 2), to_dlq=st.booleans())
    def seed_failures(self, failed: int, to_dlq: bool) -> None:
        """Start some examples from failed jobs (one of them moved to the DLQ) made by
        ordinary enqueue, claim and fail calls, compared as every step is: the rules on
        failed jobs and on the DLQ then meet one within the default profile's steps."""
        if not failed:
            return
        specs = [
            JobSpec(
                kind=KINDS[index % 2],
                queue=QUEUES[0],
                args={"seed": index},
                max_attempts=1,
                tags=("t",) if index else (),
            )
            for index in range(failed)
        ]
        model, real = self.p.run(lambda engine: engine.enqueue_many(specs))
        assert model.error is None and real.error is None, (model.error, real.error)
        self._map_jobs(model.value, real.value)
        self._assert_same(model, real, label="seed enqueue")
        model, real = self._same(
            lambda engine: engine.claim(QUEUES[0], limit=failed), label="seed claim"
        )
        for model_claim, real_claim in zip(model.value, real.value, strict=True):
            pair = (model_claim.lease, real_claim.lease)
            self.leases.append(pair)
            self._same(_failing(pair), label="seed fail")
        if to_dlq:
            first = model.value[0].lease.job_id
            ids = iter((first, self._real_id(first)))
            self._same(
                lambda engine: engine.move_failed_to_dlq(next(ids), reason="seeded"),
                label="seed move_failed_to_dlq",
            )

    @initialize(expressions=st.none() | st.sampled_from(EXPRESSIONS))
    def seed_waiting_callback(self, expressions: CallbackExpressions | None) -> None:
        """Start most examples with an attempt parked on a callback (registered with
        ``expressions``), so the callback rules meet a live one from the first step."""
        if expressions is None:
            return
        spec = JobSpec(kind=KINDS[1], queue=QUEUES[1], args={"seed": "callback"})
        model, real = self.p.run(lambda engine: engine.enqueue_many([spec]))
        assert model.error is None and real.error is None, (model.error, real.error)
        self._map_jobs(model.value, real.value)
        self._assert_same(model, real, label="seed enqueue")
        model, real = self._same(
            lambda engine: engine.claim(QUEUES[1], limit=1), label="seed claim"
        )
        # The queue was empty and is not paused: the claim takes the job.
        (model_claim,), (real_claim,) = model.value, real.value
        self.leases.append((model_claim.lease, real_claim.lease))
        leases = iter((model_claim.lease, real_claim.lease))
        callback = "seed-callback"

        async def park(engine: StorageEngine) -> tuple[Ack, Ack]:
            lease = next(leases)
            registered = await engine.register_callback(
                lease, callback_id=callback, timeout=timedelta(seconds=120), expressions=expressions
            )
            return registered, await engine.wait_for_callback(lease)

        self._same(park, label="seed wait_for_callback")
        self.callbacks.append(callback)

    # ------------------------------------------------------------------ producers
    @rule(
        kind=st.sampled_from(KINDS),
        queue=st.sampled_from(INSERT_QUEUES),
        uniques=st.tuples(
            st.none() | st.sampled_from(UNIQUE_KEYS), st.none() | st.sampled_from(UNIQUE_KEYS)
        ),
        counts=st.tuples(st.integers(1, 2), st.integers(1, 2)),
        run_in=st.none() | delays,
        commit=st.booleans(),
    )
    def enqueue_in_transaction(
        self,
        kind: str,
        queue: str,
        uniques: tuple[bytes | None, bytes | None],
        counts: tuple[int, int],
        run_in: float | None,
        commit: bool,
    ) -> None:
        """Two enqueues in one unit of work, which commits or rolls back on an exception.
        A job enqueued in it is not visible outside it before it ends; a rolled-back or
        refused unit (a unique clash, also with its own first enqueue) leaves nothing."""
        run_at = None if run_in is None else self.p.clock.now() + timedelta(seconds=run_in)
        batches = [
            job_specs(
                kind=kind,
                queue=queue,
                priority=2,
                max_attempts=2,
                run_at=run_at,
                unique=unique,
                count=count,
            )
            for unique, count in zip(uniques, counts, strict=True)
        ]

        async def unit(engine: StorageEngine) -> tuple[str, list[JobRecord], Any]:
            jobs: list[JobRecord] = []
            try:
                async with engine.transaction() as uow:
                    for specs in batches:
                        jobs.extend(await engine.enqueue_many(specs, uow=uow))
                    outside = await engine.get_job(jobs[0].id)
                    if not commit:
                        raise _RolledBack(outside)
            except _RolledBack as rolled:
                return "rolled back", jobs, rolled.seen
            return "committed", jobs, outside

        model, real = self.p.run(unit)
        if model.error is None and real.error is None:
            model_jobs, real_jobs = model.value[1], real.value[1]
            if len(model_jobs) == len(real_jobs):
                if commit:
                    self._map_jobs(model_jobs, real_jobs)
                else:
                    # Ids a rolled-back unit took are never seen again; map them only
                    # to compare its answer.
                    for model_job, real_job in zip(model_jobs, real_jobs, strict=True):
                        self.p.real_to_model[real_job.id] = model_job.id
        self._assert_same(model, real, label=f"transaction commit={commit}")

    @rule(
        kind=st.sampled_from(KINDS),
        queue=st.sampled_from(INSERT_QUEUES),
        uniques=st.lists(st.none() | st.sampled_from(UNIQUE_KEYS), min_size=1, max_size=3),
        run_in=st.none() | delays,
    )
    def enqueue_skip_duplicates(
        self, kind: str, queue: str, uniques: list[bytes | None], run_in: float | None
    ) -> None:
        """A batch whose held (or repeated) unique keys are skipped, the rest inserted."""
        run_at = None if run_in is None else self.p.clock.now() + timedelta(seconds=run_in)
        specs = [
            JobSpec(kind=kind, queue=queue, args={"n": index}, run_at=run_at, unique_key=unique)
            for index, unique in enumerate(uniques)
        ]
        model, real = self.p.run(lambda engine: engine.enqueue_many_skip_duplicates(specs))
        if model.error is None and real.error is None and len(model.value) == len(real.value):
            self._map_jobs(model.value, real.value)
        self._assert_same(model, real, label="enqueue_many_skip_duplicates")

    # ------------------------------------------------------------------ workers
    @precondition(lambda self: isinstance(self.p.real.engine, StripedClaimer))
    @rule(
        queue=st.sampled_from(QUEUES),
        stripes=st.integers(1, 2),
        data=st.data(),
        limit=st.integers(1, 3),
        deadline=st.none() | st.sampled_from([10.0, 60.0]),
    )
    def claim_stripe(
        self, queue: str, stripes: int, data: st.DataObject, limit: int, deadline: float | None
    ) -> None:
        """A striped claim answers what a claim of the physical queue the engine stores
        that stripe in answers: ``queue#stripe`` once producers write to queue storage
        (the model holds those jobs under that name too), the logical queue on canonical
        storage, which has no stripes."""
        stripe = data.draw(st.integers(0, stripes - 1), label="stripe")
        physical = stripe_queues(queue, stripes)[stripe] if self._stores_stripes() else queue
        window = None if deadline is None else timedelta(seconds=deadline)

        async def claim(engine: StorageEngine) -> list[Claim]:
            if engine is self.p.model.engine:
                return await engine.claim(physical, limit=limit, deadline=window)
            assert isinstance(engine, StripedClaimer)
            return await engine.claim_stripe(queue, stripe, stripes, limit=limit, deadline=window)

        model, real = self._same(claim, label=f"claim_stripe {queue} {stripe}/{stripes}")
        if model.error is None:
            for model_claim, real_claim in zip(model.value, real.value, strict=True):
                self.leases.append((model_claim.lease, real_claim.lease))

    def _stores_stripes(self) -> bool:
        """Whether the real engine's claims read queue storage's physical stripes: its
        producers write to queue storage (the transition state, fixed for the test)."""
        stores: bool | None = self.p.fixed.get("stores_stripes")
        if stores is None:
            real = self.p.real.engine
            assert isinstance(real, TransitionObserver), "a striped claimer must say its state"
            seen = self.p.on_real(real.observe_transition())
            stores = producers_use_queue_storage(seen.status.state)
            self.p.fixed["stores_stripes"] = stores
        return stores

    @precondition(lambda self: isinstance(self.p.real.engine, WorkerWarmUp))
    @rule(queues=st.lists(st.sampled_from(INSERT_QUEUES), max_size=2, unique=True))
    def warm_up(self, queues: list[str]) -> None:
        """Warming up is best effort and observable only as nothing: no answer, and (the
        state invariants check it) no change to any job, count or DLQ entry."""
        real = self.p.real.engine
        assert isinstance(real, WorkerWarmUp)
        answer: object = self.p.on_real(real.warm_up(queues))
        assert answer is None

    # ------------------------------------------------------------------ callbacks
    @precondition(lambda self: bool(self.callbacks))
    @rule(data=st.data(), timeout=st.sampled_from([10.0, 600.0]))
    def heartbeat_callback(self, data: st.DataObject, timeout: float) -> None:
        callback = data.draw(st.sampled_from(self.callbacks), label="callback")
        window = timedelta(seconds=timeout)
        self._same(
            lambda engine: engine.heartbeat_callback(callback, timeout=window),
            label="heartbeat_callback",
        )

    # ------------------------------------------------------------------ operators
    @precondition(lambda self: self.held.unique)
    @rule(unique=st.sampled_from(UNIQUE_KEYS))
    def cancel_by_unique_key(self, unique: bytes) -> None:
        self._same(lambda engine: engine.cancel_by_unique_key(unique), label="cancel_by_unique_key")

    @precondition(lambda self: self.held.failed)
    @rule(kind=kinds, queue=queues)
    def retry_failed(self, kind: str | None, queue: str | None) -> None:
        only = JobFilter(kind=kind, queue=queue)
        self._same(lambda engine: engine.retry_failed(only), label="retry_failed")

    @precondition(lambda self: self.held.failed)
    @rule(kind=st.sampled_from(KINDS))
    def discard_failed(self, kind: str) -> None:
        self._same(lambda engine: engine.discard_failed(kind), label="discard_failed")

    @precondition(lambda self: self.held.failed)
    @rule(kind=kinds, queue=queues, reason=reasons)
    def bulk_move_failed_to_dlq(self, kind: str | None, queue: str | None, reason: str) -> None:
        only = JobFilter(kind=kind, queue=queue)
        self._same(
            lambda engine: engine.bulk_move_failed_to_dlq(only, reason=reason),
            label="bulk_move_failed_to_dlq",
        )

    # ------------------------------------------------------------------ DLQ
    @precondition(lambda self: self.held.dlq)
    @rule(kind=kinds, queue=queues, tag=st.none() | st.just("t"))
    def bulk_retry_from_dlq(self, kind: str | None, queue: str | None, tag: str | None) -> None:
        only = DlqFilter(kind=kind, queue=queue, tag=tag)
        self._same(lambda engine: engine.bulk_retry_from_dlq(only), label="bulk_retry_from_dlq")

    @precondition(lambda self: self.held.dlq)
    @rule(
        kind=kinds,
        queue=queues,
        tag=st.none() | st.just("t"),
        data=st.data(),
        before_in=st.none() | delays,
    )
    def purge_dlq(
        self,
        kind: str | None,
        queue: str | None,
        tag: str | None,
        data: st.DataObject,
        before_in: float | None,
    ) -> None:
        """Purge by filter, optionally below an id cursor (ids map in order, so one
        cursor selects the same entries of both) and before a DLQ time."""
        before_id: int | None = None
        if self.model_ids:
            before_id = data.draw(st.none() | st.sampled_from(self.model_ids), label="before id")
        before_at = None if before_in is None else self.p.clock.now() - timedelta(seconds=before_in)
        cursors = (None, None) if before_id is None else (before_id, self._real_id(before_id))
        filters = iter(
            DlqFilter(kind=kind, queue=queue, tag=tag, before_id=cursor, before_dlq_at=before_at)
            for cursor in cursors
        )
        self._same(lambda engine: engine.purge_dlq(next(filters)), label="purge_dlq")

    @precondition(lambda self: self.held.dlq)
    @rule(data=st.data())
    def purge_dlq_job(self, data: st.DataObject) -> None:
        self._by_id(data, "purge_dlq_job", lambda engine, job_id: engine.purge_dlq_job(job_id))

    @precondition(lambda self: self.held.dlq)
    @rule(retention=st.sampled_from([0.0, 30.0, 300.0]), batch_size=st.integers(1, 3))
    def cleanup_dlq(self, retention: float, batch_size: int) -> None:
        keep = timedelta(seconds=retention)
        self._same(
            lambda engine: engine.cleanup_dlq(retention=keep, batch_size=batch_size),
            label="cleanup_dlq",
        )
