"""Job dependencies (ADR 0032) on every engine: a job inserted with parents waits
(``scheduled`` at the waiting instant, never claimable, never promoted) until every
parent completed, and is released in the transaction that completes the last one; a
parent that fails or is cancelled for good applies each waiting child's policy for it
(cancel, the default, run anyway, or the DLQ), transitively; an insert naming an unknown
or failed parent is refused and writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from awa.adapters.clock import ManualClock
from awa.domain.dependencies import MAX_PARENTS, WAITING_RUN_AT, OnParentFailure
from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.kind_policies import KindPolicies
from awa.domain.lifecycle import DEPENDENCY_FAILED_ERROR
from awa.domain.states import JobState
from awa.ports.storage import Ack, JobFilter
from tests.contract._support import (
    QUEUE,
    claim_ids,
    claim_one,
    counts_for,
    enable_dlq,
    enqueue,
    fetch,
    spec,
)
from tests.support.engines import CONTRACT_BACKOFF, EngineHandle, postgres_control

pytestmark = pytest.mark.anyio

STEPS = "contract_steps"


async def child_of(
    engine: EngineHandle,
    *parents: JobRecord | int,
    policies: tuple[OnParentFailure, ...] = (),
    **fields: Any,
) -> JobRecord:
    ids = tuple(p if isinstance(p, int) else p.id for p in parents)
    (job,) = await engine.engine.enqueue_many(
        [
            spec(
                "child_step",
                queue=STEPS,
                depends_on=ids,
                on_parent_failure=tuple(map(str, policies)),
                **fields,
            )
        ]
    )
    return job


async def run_parent(engine: EngineHandle, outcome: str = "complete") -> int:
    claim = await claim_one(engine)
    if outcome == "complete":
        assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    elif outcome == "fail":
        assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    elif outcome == "retry":
        assert await engine.engine.retry(claim.lease, error="again") == Ack.APPLIED
    else:
        assert await engine.engine.cancel_attempt(claim.lease, reason="stop") == Ack.APPLIED
    return claim.job.id


async def test_a_child_waits_for_every_parent_then_runs(engine: EngineHandle) -> None:
    first = await enqueue(engine, "parent_step")
    second = await enqueue(engine, "parent_step")
    child = await child_of(engine, first, second)
    assert (child.state, child.run_at) == (JobState.Scheduled, WAITING_RUN_AT)
    engine.clock.advance(3600)
    assert await engine.engine.promote_due() == 0
    assert await claim_ids(engine, STEPS) == []

    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    assert await claim_ids(engine, STEPS) == []

    await run_parent(engine)
    released = await fetch(engine, child.id)
    assert (released.state, released.run_at) == (JobState.Available, engine.clock.now())
    assert await claim_ids(engine, STEPS) == [child.id]


async def test_a_child_of_completed_parents_is_available_at_once(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    await run_parent(engine)
    child = await child_of(engine, parent)
    assert child.state == JobState.Available
    assert await claim_ids(engine, STEPS) == [child.id]


async def test_a_retried_parent_keeps_its_child_waiting(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    child = await child_of(engine, parent)
    await run_parent(engine, "retry")
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    engine.clock.advance(60)
    await engine.engine.promote_due()
    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Available


@pytest.mark.parametrize("outcome", ["fail", "cancel"])
async def test_a_parent_that_ends_badly_cancels_its_descendants(
    engine: EngineHandle, outcome: str
) -> None:
    parent = await enqueue(engine, "parent_step")
    other = await enqueue(engine, "parent_step", queue="contract_other")
    child = await child_of(engine, parent)
    grandchild = await child_of(engine, child, other)
    await run_parent(engine, outcome)
    for job_id in (child.id, grandchild.id):
        job = await fetch(engine, job_id)
        assert job.state == JobState.Cancelled
        assert "depends on failed" in job.errors[-1]["error"]
    assert (await fetch(engine, other.id)).state == JobState.Available


async def test_a_parent_failed_into_the_dlq_cancels_its_child(engine: EngineHandle) -> None:
    await enable_dlq(engine)
    parent = await enqueue(engine, "parent_step", max_attempts=1)
    child = await child_of(engine, parent)
    await run_parent(engine, "retry")
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    with pytest.raises(ValidationError, match="finished without completing"):
        await child_of(engine, parent)


async def test_unknown_or_failed_parents_are_refused_and_nothing_is_written(
    engine: EngineHandle,
) -> None:
    parent = await enqueue(engine, "parent_step")
    await run_parent(engine, "fail")
    live = await enqueue(engine, "parent_step")
    with pytest.raises(ValidationError, match=r"depends_on: no job with id 999999"):
        await child_of(engine, live, 999_999)
    with pytest.raises(ValidationError, match=rf"job {parent.id} \(failed\)"):
        await child_of(engine, live, parent)
    assert await engine.engine.list_jobs(JobFilter(queue=STEPS)) == []
    assert await claim_ids(engine, STEPS) == []
    assert (await engine.engine.get_job(live.id + 1)) is None


async def test_depends_on_with_run_at_and_too_many_parents_are_refused(
    engine: EngineHandle,
) -> None:
    from awa.domain.dependencies import parent_ids

    with pytest.raises(ValidationError, match="run_at"):
        await child_of(engine, 1, run_at=engine.clock.now())
    with pytest.raises(ValidationError, match=f"at most {MAX_PARENTS}"):
        parent_ids(range(1, MAX_PARENTS + 2))


async def test_a_child_inserted_in_a_transaction_waits_as_well(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    async with engine.engine.transaction() as uow:
        (child,) = await engine.engine.enqueue_many(
            [spec("child_step", queue=STEPS, depends_on=(parent.id,))], uow=uow
        )
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Available


async def test_an_operator_cancel_of_a_parent_cancels_its_waiting_descendants(
    engine: EngineHandle,
) -> None:
    parent = await enqueue(engine, "parent_step")
    child = await child_of(engine, parent)
    grandchild = await child_of(engine, child)
    cancelled = await engine.engine.cancel_job(parent.id)
    assert cancelled is not None and cancelled.state == JobState.Cancelled
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert (await fetch(engine, grandchild.id)).state == JobState.Cancelled


async def test_a_drained_parent_queue_cancels_the_children_in_other_queues(
    engine: EngineHandle,
) -> None:
    parent = await enqueue(engine, "parent_step", queue="contract_drained")
    child = await child_of(engine, parent)
    assert await engine.engine.drain_queue("contract_drained") == 1
    assert (await fetch(engine, child.id)).state == JobState.Cancelled


RUN, DLQ, CANCEL = OnParentFailure.RUN, OnParentFailure.DLQ, OnParentFailure.CANCEL


@pytest.mark.parametrize("policy", [DLQ, RUN])
async def test_a_child_drained_with_its_parent_is_cancelled_whatever_its_policy(
    engine: EngineHandle, policy: OnParentFailure
) -> None:
    # The drain cancels both; the parent's cancel does not then move its child (already
    # cancelled by the drain) into the DLQ, nor release it.
    parent = await enqueue(engine, "parent_step", queue="contract_drained")
    (child,) = await engine.engine.enqueue_many(
        [
            spec(
                "child_step",
                queue="contract_drained",
                depends_on=(parent.id,),
                on_parent_failure=(str(policy),),
            )
        ]
    )
    assert await engine.engine.drain_queue("contract_drained") == 2
    drained = await fetch(engine, child.id)
    assert drained.state == JobState.Cancelled and not drained.errors
    assert await engine.engine.get_dlq(child.id) is None
    assert await engine.engine.dlq_depth() == 0


@pytest.mark.parametrize("outcome", ["fail", "cancel"])
async def test_a_child_that_runs_anyway_waits_for_its_other_parents(
    engine: EngineHandle, outcome: str
) -> None:
    failing = await enqueue(engine, "parent_step")
    other = await enqueue(engine, "parent_step", queue="contract_other")
    child = await child_of(engine, failing, other, policies=(RUN, CANCEL))
    alone = await child_of(engine, failing, policies=(RUN,))
    await run_parent(engine, outcome)
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    released = await fetch(engine, alone.id)
    assert (released.state, released.run_at) == (JobState.Available, engine.clock.now())
    claim = await claim_one(engine, "contract_other")
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, child.id)).state == JobState.Available
    assert sorted(await claim_ids(engine, STEPS)) == sorted([child.id, alone.id])


async def test_a_child_with_the_dlq_policy_fails_into_the_dlq(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    child = await child_of(engine, parent, policies=(DLQ,))
    grandchild = await child_of(engine, child)
    runs_anyway = await child_of(engine, child, policies=(RUN,))
    await run_parent(engine, "fail")
    entry = await engine.engine.get_dlq(child.id)
    assert entry is not None
    assert (entry.reason, entry.job.state) == ("dependency_failed", JobState.Failed)
    assert "depends on failed" in entry.job.errors[-1]["error"]
    assert (await fetch(engine, grandchild.id)).state == JobState.Cancelled
    assert (await fetch(engine, runs_anyway.id)).state == JobState.Available
    assert await claim_ids(engine, STEPS) == [runs_anyway.id]


async def test_two_failed_parents_with_cancel_and_dlq_put_the_child_in_the_dlq(
    engine: EngineHandle,
) -> None:
    first = await enqueue(engine, "parent_step")
    second = await enqueue(engine, "parent_step")
    child = await child_of(engine, first, second, policies=(CANCEL, DLQ))
    cancelled = await child_of(engine, first, second, policies=(CANCEL, RUN))
    await run_parent(engine, "fail")
    assert (await fetch(engine, cancelled.id)).state == JobState.Cancelled
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    await run_parent(engine, "fail")
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await engine.engine.get_dlq(child.id) is None


async def test_one_failure_answering_cancel_and_dlq_moves_the_child_to_the_dlq(
    engine: EngineHandle,
) -> None:
    parent = await enqueue(engine, "parent_step")
    middle = await child_of(engine, parent)
    child = await child_of(engine, parent, middle, policies=(CANCEL, DLQ))
    await run_parent(engine, "fail")
    assert (await fetch(engine, middle.id)).state == JobState.Cancelled
    entry = await engine.engine.get_dlq(child.id)
    assert entry is not None and entry.reason == "dependency_failed"


async def test_an_operator_cancel_applies_the_childrens_policies(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    runs = await child_of(engine, parent, policies=(RUN,))
    dead = await child_of(engine, parent, policies=(DLQ,))
    assert await engine.engine.cancel_job(parent.id) is not None
    assert (await fetch(engine, runs.id)).state == JobState.Available
    entry = await engine.engine.get_dlq(dead.id)
    assert entry is not None and entry.reason == "dependency_failed"


async def test_retrying_a_failed_parent_brings_back_what_its_failure_cancelled(
    engine: EngineHandle,
) -> None:
    parent = await enqueue(engine, "parent_step")
    other = await enqueue(engine, "parent_step", queue="contract_other")
    child = await child_of(engine, parent, other)
    grandchild = await child_of(engine, child)
    await run_parent(engine, "fail")
    assert (await fetch(engine, grandchild.id)).state == JobState.Cancelled
    # The other parent completes while the child is cancelled: it stays satisfied.
    claim = await claim_one(engine, "contract_other")
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]

    retried = await engine.engine.retry_job(parent.id)
    assert retried is not None and retried.state == JobState.Available
    for job_id in (child.id, grandchild.id):
        back = await fetch(engine, job_id)
        assert (back.state, back.run_at, back.finalized_at) == (
            JobState.Scheduled,
            WAITING_RUN_AT,
            None,
        )
    assert await claim_ids(engine, STEPS) == []
    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Available
    assert (await fetch(engine, grandchild.id)).state == JobState.Scheduled
    claim = await claim_one(engine, STEPS)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await claim_ids(engine, STEPS) == [grandchild.id]


async def test_retry_from_dlq_of_a_parent_brings_back_its_cancelled_children(
    engine: EngineHandle,
) -> None:
    await enable_dlq(engine)
    parent = await enqueue(engine, "parent_step", max_attempts=1)
    child = await child_of(engine, parent)
    held = await child_of(engine, parent, policies=(DLQ,))
    await run_parent(engine, "retry")
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await engine.engine.retry_from_dlq(parent.id) is not None
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    # A child the policy moved to the DLQ stays there for the operator.
    assert await engine.engine.get_dlq(held.id) is not None
    await run_parent(engine)
    assert await claim_ids(engine, STEPS) == [child.id]


async def test_a_child_held_by_two_failed_parents_waits_again_after_both_retried(
    engine: EngineHandle,
) -> None:
    first = await enqueue(engine, "parent_step")
    second = await enqueue(engine, "parent_step")
    child = await child_of(engine, first, second)
    await run_parent(engine, "fail")
    await run_parent(engine, "cancel")
    assert await engine.engine.retry_job(first.id) is not None
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await engine.engine.retry_failed(JobFilter(queue="contract")) == []
    assert await engine.engine.retry_job(second.id) is not None
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    await run_parent(engine)
    assert await claim_ids(engine, STEPS) == [child.id]


async def test_one_batch_of_completions_releases_exactly_the_children_it_finishes(
    engine: EngineHandle,
) -> None:
    # One complete() call: both parents of one child, one parent of another, and a job
    # nobody waits on (queue storage closes such a batch by receipt in one statement, and
    # sends it again in a transaction when a child is released).
    first, second, third, plain = [await enqueue(engine, "parent_step") for _ in range(4)]
    later = await enqueue(engine, "parent_step", queue="contract_other")
    both = await child_of(engine, first, second)
    half = await child_of(engine, third, later)
    claims = await engine.engine.claim(QUEUE, limit=4)
    assert sorted(c.job.id for c in claims) == sorted(j.id for j in (first, second, third, plain))
    acks = await engine.engine.complete([c.lease for c in claims])
    assert acks == [Ack.APPLIED] * 4
    for job in (first, second, third, plain):
        assert (await fetch(engine, job.id)).state == JobState.Completed
    assert (await fetch(engine, both.id)).state == JobState.Available
    assert (await fetch(engine, half.id)).state == JobState.Scheduled
    assert await claim_ids(engine, STEPS) == [both.id]

    (claim,) = await engine.engine.claim("contract_other", limit=1)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, half.id)).state == JobState.Available
    assert await claim_ids(engine, STEPS) == [half.id]


async def test_one_completion_of_many_leaves_releases_their_joins_together(
    engine: EngineHandle,
) -> None:
    # Six leaves of three joins (two each) complete in one complete() call: the three
    # joins are released together (queue storage takes their waiting rows in one
    # statement), each once and with its counts; a join that also waits on a leaf not in
    # the batch keeps waiting, and one an operator cancelled while it waited stays so.
    leaves = [await enqueue(engine, "parent_step") for _ in range(6)]
    elsewhere = await enqueue(engine, "parent_step", queue="contract_other")
    joins = [await child_of(engine, leaves[2 * n], leaves[2 * n + 1]) for n in range(3)]
    waiting = await child_of(engine, leaves[0], elsewhere)
    cancelled = await child_of(engine, leaves[1], leaves[2])
    gone = await engine.engine.cancel_job(cancelled.id)
    assert gone is not None and gone.state == JobState.Cancelled
    before = await counts_for(engine, STEPS)
    assert (before.count(JobState.Scheduled), before.count(JobState.Available)) == (4, 0)
    claims = await engine.engine.claim(QUEUE, limit=10)
    assert sorted(c.job.id for c in claims) == [leaf.id for leaf in leaves]
    assert await engine.engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 6
    for join in joins:
        released = await fetch(engine, join.id)
        assert (released.state, released.run_at) == (JobState.Available, engine.clock.now())
    assert (await fetch(engine, waiting.id)).state == JobState.Scheduled
    assert (await fetch(engine, cancelled.id)).state == JobState.Cancelled
    after = await counts_for(engine, STEPS)
    assert (
        after.count(JobState.Scheduled),
        after.count(JobState.Available),
        after.count(JobState.Cancelled),
    ) == (1, 3, 1)
    assert sorted(await claim_ids(engine, STEPS)) == [join.id for join in joins]


async def test_a_batch_that_only_counts_down_leaves_the_child_waiting(
    engine: EngineHandle,
) -> None:
    parents = [await enqueue(engine, "parent_step") for _ in range(3)]
    child = await child_of(engine, *parents)
    claims = await engine.engine.claim(QUEUE, limit=2)
    assert await engine.engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 2
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    assert await claim_ids(engine, STEPS) == []
    await run_parent(engine)
    assert (await fetch(engine, child.id)).state == JobState.Available


async def test_reset_forgets_the_edges_and_waits(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    child = await child_of(engine, parent)
    await engine.engine.reset()
    edges = await engine.control.relations.job_edges(child.id, limit=10)
    assert (edges.parent_count, edges.child_count) == (0, 0)
    assert (await engine.control.relations.job_edges(parent.id, limit=10)).child_count == 0


@pytest.fixture
async def private_ring(migrated_database_url: str) -> AsyncIterator[EngineHandle]:
    """Queue storage on a two-slot ring in a schema of its own, which ``awa.jobs`` does
    not show: its jobs' edges live in schema ``awa`` beside everyone else's."""
    from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage

    schema = "qs_private_deps"
    await install_queue_storage(
        migrated_database_url, schema, queue_slot_count=2, lease_slot_count=2
    )
    clock = ManualClock()
    policies = KindPolicies()
    opened = await QueueStorageEngine.open(
        migrated_database_url,
        clock=clock,
        backoff=CONTRACT_BACKOFF,
        schema=schema,
        policies=policies,
    )
    try:
        async with postgres_control(migrated_database_url, clock) as control:
            yield EngineHandle(
                "queue_storage_private_schema",
                opened,
                clock,
                opened,
                opened.leader_lock,
                control,
                migrated_database_url,
                policies=policies,
            )
    finally:
        await opened.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "check",
    [
        test_a_child_waits_for_every_parent_then_runs,
        test_a_child_of_completed_parents_is_available_at_once,
        test_a_parent_failed_into_the_dlq_cancels_its_child,
        test_unknown_or_failed_parents_are_refused_and_nothing_is_written,
    ],
)
async def test_an_engine_on_a_private_schema_finds_its_parents(
    private_ring: EngineHandle, check: Callable[[EngineHandle], Awaitable[None]]
) -> None:
    """Parents are read where the engine keeps them, not only where ``awa.jobs`` looks
    (every insert with parents was refused there: no job with that id)."""
    await check(private_ring)


async def test_a_parent_deleted_before_it_finished_counts_as_cancelled(
    engine: EngineHandle,
) -> None:
    """A waiting job whose parent an operator deleted does not wait for ever: the delete
    applies each child's policy as a cancel of the parent would, in its transaction, and
    the edges are resolved (so the retention prunes them once the children finished)."""
    parent = await enqueue(engine, "parent_step")
    cancels = await child_of(engine, parent)
    grandchild = await child_of(engine, cancels)
    runs = await child_of(engine, parent, policies=(RUN,))
    dead = await child_of(engine, parent, policies=(DLQ,))
    assert await engine.engine.delete_jobs([parent.id]) == 1
    assert await engine.engine.get_job(parent.id) is None
    cancelled = await fetch(engine, cancels.id)
    assert cancelled.state == JobState.Cancelled
    assert cancelled.errors[-1]["error"] == DEPENDENCY_FAILED_ERROR
    assert (await fetch(engine, grandchild.id)).state == JobState.Cancelled
    assert (await fetch(engine, runs.id)).state == JobState.Available
    entry = await engine.engine.get_dlq(dead.id)
    assert entry is not None and entry.reason == "dependency_failed"
    edges = await engine.control.relations.job_edges(cancels.id, limit=10)
    assert [(e.job_id, e.failed) for e in edges.parents] == [(parent.id, True)]
    edges = await engine.control.relations.job_edges(runs.id, limit=10)
    assert [(e.job_id, e.satisfied_at is not None) for e in edges.parents] == [(parent.id, True)]


async def test_deleting_a_finished_parent_changes_no_child(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step")
    other = await enqueue(engine, "parent_step")
    child = await child_of(engine, parent, other)
    assert await run_parent(engine) == parent.id
    assert await engine.engine.delete_jobs([parent.id]) == 1
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    assert await run_parent(engine) == other.id
    assert (await fetch(engine, child.id)).state == JobState.Available


async def _run_past_a_step(engine: EngineHandle) -> tuple[JobRecord, JobRecord, JobRecord]:
    """A parent, its step, and a last job waiting on the parent by ``run`` and on the step
    by ``cancel`` (the step's failure dooms it; the parent's alone would not)."""
    parent = await enqueue(engine, "wf_parent")
    step = await enqueue(engine, "wf_step", queue=STEPS, depends_on=(parent.id,))
    last = await enqueue(
        engine,
        "wf_last",
        queue=STEPS,
        depends_on=(parent.id, step.id),
        on_parent_failure=(str(OnParentFailure.RUN), str(OnParentFailure.CANCEL)),
    )
    return parent, step, last


async def test_a_run_edge_is_resolved_though_the_walk_meets_a_child_doomed_before(
    engine: EngineHandle,
) -> None:
    """An edge that doomed its child earlier is not walked again: a parent's failure that
    reaches that child through it leaves the child as it was and resolves the child's
    ``run`` edge from the parent (before: the child counted doomed again, and its ``run``
    edge stayed unresolved for ever, so a search for vanished parents answered the parent
    once more on every run after it was deleted)."""
    parent, step, last = await _run_past_a_step(engine)
    assert await engine.engine.cancel_job(step.id) is not None
    assert (await fetch(engine, last.id)).state == JobState.Cancelled
    assert await engine.engine.cancel_job(parent.id) is not None
    edges = await engine.control.relations.job_edges(last.id, limit=10)
    resolved = {e.job_id: e.satisfied_at is not None or e.failed for e in edges.parents}
    assert resolved == {parent.id: True, step.id: True}
    assert (await fetch(engine, last.id)).state == JobState.Cancelled


async def test_a_run_edge_to_a_child_the_same_failure_dooms_is_resolved(
    engine: EngineHandle,
) -> None:
    """A parent's cancel that dooms a child through the parent's own child (its ``cancel``
    edge) resolves the child's ``run`` edge from the parent too: every edge of a finished
    parent is answered. Before, that edge stayed unresolved, outlived the parent, and the
    search for vanished parents answered the parent again once it was deleted (the
    model-vs-real machine found the in-memory engine and queue storage apart there)."""
    parent, step, last = await _run_past_a_step(engine)
    assert await engine.engine.cancel_job(parent.id) is not None
    assert (await fetch(engine, step.id)).state == JobState.Cancelled
    assert (await fetch(engine, last.id)).state == JobState.Cancelled
    edges = await engine.control.relations.job_edges(last.id, limit=10)
    answered = {e.job_id: (e.satisfied_at is not None, e.failed) for e in edges.parents}
    assert answered == {parent.id: (True, False), step.id: (False, True)}


async def test_a_child_brought_back_then_moved_to_the_dlq_leaves_only_its_dlq_entry(
    engine: EngineHandle,
) -> None:
    """A child cancelled by one parent's failure, brought back by that parent's retry, and
    then moved to the DLQ by the other parent's failure (the first completed) is in the
    DLQ alone: the cancelled version the retry replaced does not come back beside it."""
    first = await enqueue(engine, "parent_step")
    second = await enqueue(engine, "parent_step")
    child = await child_of(engine, first, second, policies=(CANCEL, DLQ))
    assert await run_parent(engine, "fail") == first.id
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await engine.engine.retry_job(first.id) is not None
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    assert await run_parent(engine) == first.id
    assert await run_parent(engine, "fail") == second.id
    entry = await engine.engine.get_dlq(child.id)
    assert entry is not None and entry.reason == "dependency_failed"
    assert await engine.engine.get_job(child.id) is None
    listed = await engine.engine.list_jobs(JobFilter(queue=STEPS), limit=10)
    assert listed == []
