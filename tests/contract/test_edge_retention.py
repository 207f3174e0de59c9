"""The retention of dependency edges (ADR 0032) on every engine: the maintenance
leader's ``dependency_cleanup`` duty deletes the edges of a child that finished once
every one of them was resolved more than ``EDGE_RETENTION`` ago; a live child keeps its
edges whatever their age; a batch's counts are stored on its row first, so they read
the same after the pruning, until one more retention has passed (ADR 0035)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import psycopg
import pytest

from awa.domain import batches, lifecycle
from awa.domain.batches import BatchCounts
from awa.domain.dependencies import EDGE_RETENTION, VANISHED_GRACE, OnParentFailure
from awa.domain.job import JobRecord
from awa.domain.kind_policies import ChangeJob, Effect
from awa.domain.lifecycle import DEPENDENCY_FAILED_ERROR
from awa.domain.states import JobState
from awa.ports.storage import Ack, JobFilter, VanishedStep
from awa.runtime import maintenance_duties, parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import Duty, MaintenanceDuties
from tests.contract._support import QUEUE, claim_one, enqueue, fetch, spec
from tests.contract.test_batches import REPORTS, batch_of, end_one
from tests.support.engines import EngineHandle
from tests.unit.test_runtime_support import FAST

pytestmark = pytest.mark.anyio

SECOND = timedelta(seconds=1)


def cleanup_duty(engine: EngineHandle) -> Duty:
    config = parse_start_args(None, handler_queues={QUEUE}, **FAST)
    duties = MaintenanceDuties(
        engine.engine,
        config,
        InFlight(),
        fence=lambda: None,
        clock=engine.clock,
        control=engine.control,
    ).schedule()
    (duty,) = [d for d in duties if d.name == "dependency_cleanup"]
    assert duty.interval == config.cleanup_interval
    return duty


async def parents_of(engine: EngineHandle, job_id: int) -> list[int]:
    edges = await engine.control.relations.job_edges(job_id, limit=10)
    return [edge.job_id for edge in edges.parents]


async def test_finished_edges_go_after_the_retention_and_batch_counts_stay(
    engine: EngineHandle,
) -> None:
    relations = engine.control.relations
    duty = cleanup_duty(engine)
    members, callback = await batch_of(engine, 3)
    for outcome in ("complete", "fail", "cancel"):
        await end_one(engine, outcome)
    report = await claim_one(engine, REPORTS)
    assert report.job.id == callback.id
    assert await engine.engine.complete([report.lease]) == [Ack.APPLIED]
    final = BatchCounts(3, 1, 1, 1)
    assert await relations.batch_counts(callback.id) == final

    # A workflow: a parent, a child that finished and a child still waiting to run.
    parent = await enqueue(engine, "wf_parent")
    done = await enqueue(engine, "wf_done", queue="wf_children", depends_on=(parent.id,))
    live = await enqueue(engine, "wf_live", queue="wf_later", depends_on=(parent.id,))
    claim = await claim_one(engine)
    assert claim.job.id == parent.id
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    child = await claim_one(engine, "wf_children")
    assert await engine.engine.complete([child.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, live.id)).state == JobState.Available

    # Just short of the retention: every edge stays.
    engine.clock.advance(EDGE_RETENTION - SECOND)
    await duty.run()
    assert sorted(await parents_of(engine, callback.id)) == sorted(members)
    assert await parents_of(engine, done.id) == [parent.id]

    # Past it: the finished children's edges go, the live child's stay, and the batch
    # reads the counts stored on its row.
    engine.clock.advance(2 * SECOND)
    await duty.run()
    assert await parents_of(engine, callback.id) == []
    assert await parents_of(engine, done.id) == []
    assert await parents_of(engine, live.id) == [parent.id]
    assert await relations.batch_counts(callback.id) == final
    assert await relations.parent_counts(callback.id) == final
    assert await relations.parent_counts(done.id) == BatchCounts(0, 0, 0, 0)

    # The live child's edges stay however old they are; the batch is forgotten one more
    # retention after its counts were stored.
    engine.clock.advance(EDGE_RETENTION - SECOND)
    await duty.run()
    assert await relations.batch_counts(callback.id) == final
    engine.clock.advance(2 * SECOND)
    await duty.run()
    assert await relations.batch_counts(callback.id) is None
    assert await parents_of(engine, live.id) == [parent.id]


async def test_a_batch_still_running_keeps_its_edges(engine: EngineHandle) -> None:
    relations = engine.control.relations
    duty = cleanup_duty(engine)
    members, callback = await batch_of(engine, 2)
    await end_one(engine, "complete")
    await end_one(engine, "fail")
    # Released but not run: the callback is live, so its edges stay.
    assert (await fetch(engine, callback.id)).state == JobState.Available
    engine.clock.advance(EDGE_RETENTION + SECOND)
    await duty.run()
    assert sorted(await parents_of(engine, callback.id)) == sorted(members)
    assert await relations.batch_counts(callback.id) == BatchCounts(2, 1, 1, 0)


async def test_a_batch_inserted_before_its_row_existed_keeps_its_counts(
    engine: EngineHandle,
) -> None:
    """A batch inserted before migration 0523 has no ``awa.batches`` row: the duty
    recognises it by its callback's metadata and stores its counts all the same."""
    if engine.database_url is None:
        pytest.skip("the in-memory engines had batch rows from the start")
    relations = engine.control.relations
    duty = cleanup_duty(engine)
    _, callback = await batch_of(engine, 2)
    async with await psycopg.AsyncConnection.connect(engine.database_url) as conn:
        await conn.execute("DELETE FROM awa.batches WHERE id = %s", (callback.id,))
    assert await relations.batch_counts(callback.id) is None
    await end_one(engine, "complete")
    await end_one(engine, "cancel")
    report = await claim_one(engine, REPORTS)
    assert await engine.engine.complete([report.lease]) == [Ack.APPLIED]
    engine.clock.advance(EDGE_RETENTION + SECOND)
    await duty.run()
    assert await parents_of(engine, callback.id) == []
    assert await relations.batch_counts(callback.id) == BatchCounts(2, 1, 0, 1)


async def test_the_walk_goes_on_past_a_live_child_a_page_at_a_time(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement reads one bounded page of the edges resolved before the cutoff; a
    run that filled its pages answers True (run me again) and the next run goes on from
    where it stopped, past a live child, instead of reading the same first page again."""
    monkeypatch.setattr(maintenance_duties, "EDGE_PRUNE_BATCH", 1)
    monkeypatch.setattr(maintenance_duties, "_CLEANUP_ROUNDS", 1)
    duty = cleanup_duty(engine)
    parent = await enqueue(engine, "wf_parent")
    live = await enqueue(engine, "wf_live", queue="wf_later", depends_on=(parent.id,))
    done = [
        await enqueue(engine, "wf_done", queue="wf_children", depends_on=(parent.id,))
        for _ in range(2)
    ]
    claim = await claim_one(engine)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    for _ in done:
        child = await claim_one(engine, "wf_children")
        assert await engine.engine.complete([child.lease]) == [Ack.APPLIED]
    engine.clock.advance(EDGE_RETENTION + SECOND)

    answers = []
    for _ in range(6):
        answers.append(await duty.run())
        if answers[-1] is not True:
            break
    # One edge a page: the live child's (kept), then each finished child's, then none.
    assert answers == [True, True, True, False]
    assert [await parents_of(engine, job.id) for job in done] == [[], []]
    assert await parents_of(engine, live.id) == [parent.id]


async def test_edges_of_a_deleted_parent_go_after_the_retention(engine: EngineHandle) -> None:
    """A parent deleted before it finished resolves its edges as cancelled (ADR 0032, "A
    parent that vanishes"): once its child finished, they are pruned like any other."""
    duty = cleanup_duty(engine)
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    assert await engine.engine.delete_jobs([parent.id]) == 1
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    engine.clock.advance(EDGE_RETENTION - SECOND)
    await duty.run()
    assert await parents_of(engine, child.id) == [parent.id]
    engine.clock.advance(2 * SECOND)
    await duty.run()
    assert await parents_of(engine, child.id) == []


async def _sql(engine: EngineHandle, statement: str, *params: object) -> list[tuple[object, ...]]:
    assert engine.database_url is not None
    async with await psycopg.AsyncConnection.connect(engine.database_url) as conn:
        cur = await conn.execute(statement.encode(), params)
        return list(await cur.fetchall()) if cur.description else []


async def _sightings(engine: EngineHandle) -> list[tuple[object, ...]]:
    return await _sql(
        engine, "SELECT parent_id, deleted FROM awa.dependency_vanished_parents ORDER BY 1"
    )


async def test_a_sql_delete_of_a_parent_answers_its_children(engine: EngineHandle) -> None:
    """A ``DELETE`` on ``awa.jobs`` of a job that had not finished records it, and the next
    run of the duty answers its children as the engine's ``delete_jobs`` would (ADR 0032,
    "A parent that vanishes"): each child's policy applies, the edges are resolved. A
    finished job deleted in SQL is not recorded."""
    if engine.database_url is None:
        pytest.skip("the in-memory engines have no SQL surface")
    duty = cleanup_duty(engine)
    parent = await enqueue(engine, "wf_parent")
    cancels = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    runs = await enqueue(
        engine,
        "wf_child",
        queue="wf_children",
        depends_on=(parent.id,),
        on_parent_failure=(str(OnParentFailure.RUN),),
    )
    if not await _sql(engine, "SELECT 1 FROM awa.jobs WHERE id = %s", parent.id):
        pytest.skip("awa.jobs does not show this engine's private schema")
    await _sql(engine, "DELETE FROM awa.jobs WHERE id = %s", parent.id)
    assert await engine.engine.get_job(parent.id) is None
    assert await _sightings(engine) == [(parent.id, True)]
    assert (await fetch(engine, cancels.id)).state == JobState.Scheduled
    await duty.run()
    cancelled = await fetch(engine, cancels.id)
    assert cancelled.state == JobState.Cancelled
    assert cancelled.errors[-1]["error"] == DEPENDENCY_FAILED_ERROR
    assert (await fetch(engine, runs.id)).state == JobState.Available
    edges = await engine.control.relations.job_edges(cancels.id, limit=10)
    assert [(e.job_id, e.failed) for e in edges.parents] == [(parent.id, True)]
    assert await _sightings(engine) == []

    # A finished parent deleted in SQL had answered its children when it finished.
    done = await enqueue(engine, "wf_parent")
    other = await enqueue(engine, "wf_parent")
    waits = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(done.id, other.id))
    claim = await claim_one(engine)
    assert claim.job.id == done.id
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    await _sql(engine, "DELETE FROM awa.jobs WHERE id = %s", done.id)
    assert await _sightings(engine) == []
    await duty.run()
    assert (await fetch(engine, waits.id)).state == JobState.Scheduled


def _gone_unseen_in_memory(engine: EngineHandle, job_id: int) -> None:
    """Remove a job from the in-memory store without a word, as no write does."""
    store = getattr(engine.engine, "store", None)
    if store is None:
        pytest.skip("the in-memory routing engine does not hand out its store")
    for jobs in store.state.sides.values():
        jobs.pop(job_id, None)


async def _gone_unseen(engine: EngineHandle, job_id: int) -> None:
    """Remove a job as an earlier release's delete did: its children not answered."""
    if engine.database_url is None:
        _gone_unseen_in_memory(engine, job_id)
        return
    if not await _sql(engine, "SELECT 1 FROM awa.jobs WHERE id = %s", job_id):
        pytest.skip("awa.jobs does not show this engine's private schema")
    await _sql(engine, "DELETE FROM awa.jobs WHERE id = %s", job_id)
    await _sql(engine, "DELETE FROM awa.dependency_vanished_parents")
    assert await engine.engine.get_job(job_id) is None


async def test_the_search_for_vanished_parents_walks_a_page_at_a_time(
    engine: EngineHandle,
) -> None:
    """Each step reads at most ``limit`` parents after ``after`` and says where the next
    starts; a short page starts over. A parent gone is answered once it is due."""
    parents = [await enqueue(engine, "wf_parent") for _ in range(3)]
    children = [
        await enqueue(engine, "wf_child", queue="wf_children", depends_on=(p.id,)) for p in parents
    ]
    await _gone_unseen(engine, parents[1].id)
    steps: list[VanishedStep] = []
    after = 0
    while len(steps) < 10:
        step = await engine.engine.answer_vanished_parents(
            after=after, limit=1, seen_before=engine.clock.now() - VANISHED_GRACE
        )
        steps.append(step)
        if step.following is None:
            break
        after = step.following
    assert [s.following for s in steps] == [p.id for p in parents] + [None]
    if engine.database_url is not None:
        # Seen gone on the second step; answered by a step once the grace has passed.
        assert sum(s.answered for s in steps) == 0
        assert (await fetch(engine, children[1].id)).state == JobState.Scheduled
        engine.clock.advance(VANISHED_GRACE)
        step = await engine.engine.answer_vanished_parents(
            after=0, limit=1, seen_before=engine.clock.now() - VANISHED_GRACE
        )
        assert (step.following, step.answered) == (parents[0].id, 1)
    else:
        assert [s.answered for s in steps] == [0, 1, 0, 0]
    assert [(await fetch(engine, c.id)).state for c in children] == [
        JobState.Scheduled,
        JobState.Cancelled,
        JobState.Scheduled,
    ]
    assert await engine.engine.answer_vanished_parents(
        after=0, limit=0, seen_before=engine.clock.now()
    ) == VanishedStep(None, 0)


async def test_a_parent_gone_unseen_is_answered_only_when_seen_gone_again(
    engine: EngineHandle,
) -> None:
    """A parent that left without a word (deleted by an earlier release, or under the
    trigger): the first run only records that it is gone; a run ``VANISHED_GRACE`` later
    that finds it gone again answers its children. The in-memory store, written whole
    each time, has no move to be mid-way through: one run answers them."""
    duty = cleanup_duty(engine)
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    await _gone_unseen(engine, parent.id)
    if engine.database_url is None:
        await duty.run()
        assert (await fetch(engine, child.id)).state == JobState.Cancelled
        return
    await duty.run()
    assert await _sightings(engine) == [(parent.id, False)]
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    engine.clock.advance(VANISHED_GRACE - SECOND)
    await duty.run()
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    engine.clock.advance(2 * SECOND)
    await duty.run()
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await _sightings(engine) == []


async def test_a_parent_seen_gone_and_found_again_is_not_answered(
    engine: EngineHandle,
) -> None:
    """A parent read gone once (as one mid-way through a move between engines or ring
    slots can be) and there at the next look is no vanished parent: its sighting is
    forgotten and its children keep waiting."""
    if engine.database_url is None:
        pytest.skip("the in-memory engines have no SQL surface")
    duty = cleanup_duty(engine)
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    # Seen gone long ago: due, but read again before it is answered.
    await _sql(
        engine,
        "INSERT INTO awa.dependency_vanished_parents (parent_id, seen_at) VALUES (%s, %s)",
        parent.id,
        engine.clock.now() - 2 * VANISHED_GRACE,
    )
    await duty.run()
    assert await _sightings(engine) == []
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    # Seen gone just now: forgotten when the page finds it there.
    await _sql(
        engine,
        "INSERT INTO awa.dependency_vanished_parents (parent_id, seen_at) VALUES (%s, %s)",
        parent.id,
        engine.clock.now(),
    )
    await duty.run()
    assert await _sightings(engine) == []
    claim = await claim_one(engine)
    assert claim.job.id == parent.id
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, child.id)).state == JobState.Available


RELAY = "wf_relay"
RELAY_QUEUE = "wf_relays"


def _cancel_the_peer(job: JobRecord) -> Sequence[Effect]:
    """A relay's end cancels the job its args name (a kind rule, ADR 0028)."""
    at = job.finalized_at
    return () if at is None else (ChangeJob(int(job.args["peer"]), lifecycle.operator_cancel(at)),)


async def _finished_unanswered(engine: EngineHandle) -> tuple[JobRecord, JobRecord]:
    """A parent cancelled by another job's kind rule, and its child: an effect's own
    transition carries no further effects (ADR 0028), so the parent finished while its
    child still waits on it through an unresolved edge."""
    engine.policies.set_effects(RELAY, _cancel_the_peer)
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    await enqueue(engine, RELAY, queue=RELAY_QUEUE, args={"peer": parent.id})
    claim = await claim_one(engine, RELAY_QUEUE)
    assert await engine.engine.cancel_attempt(claim.lease, reason="relay") == Ack.APPLIED
    assert (await fetch(engine, parent.id)).state == JobState.Cancelled
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    return parent, child


async def test_a_finished_parent_deleted_while_a_child_waits_answers_it(
    engine: EngineHandle,
) -> None:
    """The rule for a deleted parent reads its edges, not the state it was deleted in: a
    finished parent that a child still waits on answers it as cancelled when the engine
    deletes it, in the delete's transaction."""
    parent, child = await _finished_unanswered(engine)
    assert await engine.engine.delete_jobs([parent.id]) == 1
    answered = await fetch(engine, child.id)
    assert answered.state == JobState.Cancelled
    assert answered.errors[-1]["error"] == DEPENDENCY_FAILED_ERROR


async def test_an_operator_cancel_of_a_parent_already_cancelled_answers_nothing(
    engine: EngineHandle,
) -> None:
    """``cancel_job`` of a parent an effect cancelled changes nothing, on every engine: its
    child goes on waiting and a batch over it counts no member finished (queue storage
    answered them once more; the model-vs-real machine found it on a batch's counts)."""
    engine.policies.set_effects(RELAY, _cancel_the_peer)
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    (callback,) = await engine.engine.enqueue_many(
        [batches.callback_spec(spec("batch_report", queue=REPORTS), [parent.id])]
    )
    await enqueue(engine, RELAY, queue=RELAY_QUEUE, args={"peer": parent.id})
    claim = await claim_one(engine, RELAY_QUEUE)
    assert await engine.engine.fail(claim.lease, error="relay") == Ack.APPLIED
    cancelled = await fetch(engine, parent.id)
    assert cancelled.state == JobState.Cancelled
    assert await engine.engine.cancel_job(parent.id) == cancelled
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    counts = await engine.control.relations.parent_counts(callback.id)
    assert (counts.size, counts.cancelled, counts.pending) == (1, 0, 1)
    assert (await fetch(engine, callback.id)).state == JobState.Scheduled


async def test_a_finished_parent_deleted_in_sql_while_a_child_waits_is_answered_next_run(
    engine: EngineHandle,
) -> None:
    """A ``DELETE`` on ``awa.jobs`` of a finished parent that a child still waits on is
    recorded as a SQL delete of an unfinished one is, and the next run of the duty answers
    the child, as the in-memory engines' search answers a parent gone from their store
    (before, nothing was recorded and the child waited ``VANISHED_GRACE`` more)."""
    if engine.database_url is None:
        pytest.skip("the in-memory engines have no SQL surface")
    duty = cleanup_duty(engine)
    parent, child = await _finished_unanswered(engine)
    if not await _sql(engine, "SELECT 1 FROM awa.jobs WHERE id = %s", parent.id):
        pytest.skip("awa.jobs does not show this engine's private schema")
    await _sql(engine, "DELETE FROM awa.jobs WHERE id = %s", parent.id)
    assert await _sightings(engine) == [(parent.id, True)]
    await duty.run()
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await _sightings(engine) == []


async def _delete_one(engine: EngineHandle, job_id: int, how: str) -> None:
    """Delete one job through the engine (``api``) or a ``DELETE`` on ``awa.jobs`` (``sql``;
    skipped where the engine has no SQL surface or ``awa.jobs`` does not show it)."""
    if how == "api":
        assert await engine.engine.delete_jobs([job_id]) == 1
        return
    if engine.database_url is None:
        pytest.skip("the in-memory engines have no SQL surface")
    if not await _sql(engine, "SELECT 1 FROM awa.jobs WHERE id = %s", job_id):
        pytest.skip("awa.jobs does not show this engine's private schema")
    await _sql(engine, "DELETE FROM awa.jobs WHERE id = %s", job_id)


@pytest.mark.parametrize("how", ["api", "sql"])
async def test_a_child_brought_back_by_its_parents_retry_is_deleted_whole(
    engine: EngineHandle, how: str
) -> None:
    """A child cancelled by its parent's failure and brought back by the parent's retry
    is one job: deleting it (through the engine, or a ``DELETE`` on ``awa.jobs``) leaves
    nothing of it, not the cancelled version the retry replaced."""
    parent = await enqueue(engine, "wf_parent")
    child = await enqueue(engine, "wf_child", queue="wf_children", depends_on=(parent.id,))
    claim = await claim_one(engine)
    assert claim.job.id == parent.id
    assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    assert (await fetch(engine, child.id)).state == JobState.Cancelled
    assert await engine.engine.retry_job(parent.id) is not None
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    await _delete_one(engine, child.id, how)
    assert await engine.engine.get_job(child.id) is None
    assert await engine.engine.list_jobs(JobFilter(), limit=100) == [await fetch(engine, parent.id)]


@pytest.mark.parametrize("how", ["api", "sql"])
@pytest.mark.parametrize("ended", ["fail", "cancel"])
async def test_a_job_retried_by_an_operator_is_deleted_whole(
    engine: EngineHandle, how: str, ended: str
) -> None:
    """A failed or cancelled job an operator retried, deleted before it runs again, leaves
    nothing of it behind: not the failed or cancelled version the retry replaced."""
    job = await enqueue(engine, "wf_parent")
    claim = await claim_one(engine)
    if ended == "fail":
        assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    else:
        assert await engine.engine.cancel_attempt(claim.lease, reason="stop") == Ack.APPLIED
    retried = await engine.engine.retry_job(job.id)
    assert retried is not None and retried.state == JobState.Available
    await _delete_one(engine, job.id, how)
    assert await engine.engine.get_job(job.id) is None
    assert await engine.engine.list_jobs(JobFilter(), limit=100) == []
