"""Batch operations: the targets and the per-job change on every engine and on the routing
engine (before and after the move to queue storage), the runner over each engine with its
backend's operation store, and the operation store itself once per backend."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import anyio
import psycopg
import pytest

from awa.adapters._pg import transition
from awa.adapters.clock import ManualClock, SystemClock
from awa.domain.batch_ops import (
    DEFAULT_RETENTION,
    FINAL_STATES,
    ORIGINAL_PRIORITY_KEY,
    ORIGINAL_QUEUE_KEY,
    BatchFilter,
    BatchOperation,
    BatchOpKind,
    BatchOpState,
    BatchSpec,
    ItemOutcome,
    ItemResult,
)
from awa.domain.errors import ValidationError
from awa.domain.states import JobState
from awa.entrypoints.routing import open_postgres_backend
from awa.ports.batch_ops import BatchOperationStore
from awa.ports.storage import StorageEngine
from awa.runtime.batch_runner import BatchRunner
from tests.conftest import migrate_template
from tests.contract._support import QUEUE, SECOND, claim_ids, claim_one, enqueue, fetch
from tests.contract.conftest import BackendHandle
from tests.support.engines import (
    CONTRACT_BACKOFF,
    ENGINES,
    EngineHandle,
    forget_control_plane,
    open_engine,
)
from tests.support.pg import DatabaseFactory

pytestmark = pytest.mark.anyio

ROUTING = ("routing_canonical", "routing_queue_storage")
PRIORITY_4 = BatchSpec(BatchOpKind.SET_PRIORITY, priority=4)


def _params() -> list[object]:
    names: list[object] = [
        pytest.param(name, marks=[pytest.mark.postgres] if entry.needs_database else [])
        for name, entry in sorted(ENGINES.items())
    ]
    return names + [pytest.param(name, marks=[pytest.mark.postgres]) for name in ROUTING]


@asynccontextmanager
async def _routing(name: str, url: str) -> AsyncIterator[EngineHandle]:
    if name == "routing_queue_storage":
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            assert await transition.auto_finalize_if_fresh(conn)
    clock = ManualClock()
    backend = await open_postgres_backend(url, clock=clock, backoff=CONTRACT_BACKOFF)
    router = backend.engine
    try:
        yield EngineHandle(name, router, clock, router, router.leader_lock, backend.control)
    finally:
        await router.close()


@pytest.fixture(params=_params())
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[EngineHandle]:
    name: str = request.param
    if name in ROUTING:
        factory: DatabaseFactory = request.getfixturevalue("pg_databases")
        fresh = factory.create(factory.template("migrated", migrate_template))
        try:
            async with _routing(name, fresh) as handle:
                yield handle
        finally:
            factory.release(fresh)
        return
    url: str | None = None
    if ENGINES[name].needs_database:
        urls: dict[str, str] = request.getfixturevalue("contract_databases")
        if name not in urls:
            factory = request.getfixturevalue("pg_databases")
            urls[name] = factory.create(factory.template("migrated", migrate_template))
        url = urls[name]
    async with open_engine(name, url) as handle:
        await handle.engine.reset()
        await forget_control_plane(handle.control, handle.clock)
        yield handle


async def _ids(handle: EngineHandle, filter: BatchFilter) -> list[int]:
    return [job.id for job in await handle.engine.list_batch_targets(filter, limit=1000)]


async def test_targets_are_queued_jobs_matching_every_field(engine: EngineHandle) -> None:
    a = await enqueue(engine, "kind_a", tags=("t",))
    engine.clock.advance(10)
    b = await enqueue(engine, "kind_b")
    later = await enqueue(engine, "kind_a", run_at=engine.clock.now() + 60 * SECOND)
    other = await enqueue(engine, "kind_a", queue="other", tags=("t",))
    running = await enqueue(engine, "kind_a", queue="busy")
    await claim_one(engine, "busy")
    e = engine.engine
    everything = BatchFilter()
    assert await _ids(engine, everything) == [a.id, b.id, later.id, other.id]
    assert await e.count_batch_targets(everything) == 4
    assert await _ids(engine, BatchFilter(queue=QUEUE)) == [a.id, b.id, later.id]
    assert await _ids(engine, BatchFilter(kind="kind_a")) == [a.id, later.id, other.id]
    assert await _ids(engine, BatchFilter(tag="t")) == [a.id, other.id]
    assert await _ids(engine, BatchFilter(state=JobState.Scheduled)) == [later.id]
    assert await _ids(engine, BatchFilter(ids=(b.id, other.id, running.id, 10**9))) == [
        b.id,
        other.id,
    ]
    assert await _ids(engine, BatchFilter(ids=())) == []
    assert await _ids(engine, BatchFilter(created_at_lt=b.created_at)) == [a.id]
    assert await _ids(engine, BatchFilter(created_at_gte=b.created_at, queue=QUEUE)) == [
        b.id,
        later.id,
    ]
    assert await e.count_batch_targets(BatchFilter(queue="busy")) == 0
    paged = await e.list_batch_targets(everything, after_id=a.id, limit=2)
    assert [job.id for job in paged] == [b.id, later.id]


async def test_set_priority_changes_queued_jobs_and_records_the_original(
    engine: EngineHandle,
) -> None:
    job = await enqueue(engine, priority=2)
    deferred = await enqueue(engine, run_at=engine.clock.now() + 60 * SECOND)
    e = engine.engine
    assert await e.apply_batch_change(job.id, PRIORITY_4) == ItemResult(
        job.id, ItemOutcome.PROCESSED
    )
    assert (await e.apply_batch_change(deferred.id, PRIORITY_4)).outcome == ItemOutcome.PROCESSED
    changed = await fetch(engine, job.id)
    assert changed.priority == 4 and changed.state == JobState.Available
    assert changed.metadata == {ORIGINAL_PRIORITY_KEY: 2}
    kept = await fetch(engine, deferred.id)
    assert kept.priority == 4 and kept.state == JobState.Scheduled
    # Again: already there, so skipped, and the first original stays recorded.
    assert (await e.apply_batch_change(job.id, PRIORITY_4)).outcome == ItemOutcome.SKIPPED
    back = BatchSpec(BatchOpKind.SET_PRIORITY, priority=1)
    assert (await e.apply_batch_change(job.id, back)).outcome == ItemOutcome.PROCESSED
    assert (await fetch(engine, job.id)).metadata == {ORIGINAL_PRIORITY_KEY: 2}
    assert (await e.apply_batch_change(10**9, PRIORITY_4)).outcome == ItemOutcome.MISSING
    claims = await e.claim(QUEUE, limit=10)
    assert [(c.job.id, c.job.priority) for c in claims] == [(job.id, 1)]


async def test_claimed_and_finished_jobs_are_skipped(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    e = engine.engine
    assert (await e.apply_batch_change(job.id, PRIORITY_4)).outcome == ItemOutcome.SKIPPED
    await e.complete([claim.lease])
    assert (await e.apply_batch_change(job.id, PRIORITY_4)).outcome == ItemOutcome.SKIPPED
    done = await fetch(engine, job.id)
    assert done.priority == 2 and done.state == JobState.Completed and done.metadata == {}


async def test_move_queue_moves_each_job_once_and_keeps_fifo_in_the_new_lane(
    engine: EngineHandle,
) -> None:
    first_there = await enqueue(engine, queue="target")
    engine.clock.advance(1)
    older = await enqueue(engine)
    engine.clock.advance(1)
    newer = await enqueue(engine)
    engine.clock.advance(1)
    last_there = await enqueue(engine, queue="target")
    move = BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target")
    e = engine.engine
    # Moved newest first: the lane still hands them out oldest first.
    for job in (newer, older):
        assert (await e.apply_batch_change(job.id, move)).outcome == ItemOutcome.PROCESSED
    assert (await e.apply_batch_change(older.id, move)).outcome == ItemOutcome.SKIPPED
    moved = await fetch(engine, older.id)
    assert moved.queue == "target" and moved.priority == older.priority
    assert moved.metadata == {ORIGINAL_QUEUE_KEY: QUEUE}
    assert await claim_ids(engine, QUEUE) == []
    assert await claim_ids(engine, "target") == [first_there.id, older.id, newer.id, last_there.id]
    counts = {c.queue: c.counts for c in await e.queue_counts()}
    assert counts["target"][JobState.Running] == 4
    assert counts.get(QUEUE, {}).get(JobState.Available, 0) == 0


async def test_move_queue_with_priority_and_a_deferred_job(engine: EngineHandle) -> None:
    deferred = await enqueue(engine, run_at=engine.clock.now() + 5 * SECOND)
    move = BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target", priority=1)
    e = engine.engine
    assert (await e.apply_batch_change(deferred.id, move)).outcome == ItemOutcome.PROCESSED
    job = await fetch(engine, deferred.id)
    assert (job.queue, job.priority, job.state) == ("target", 1, JobState.Scheduled)
    assert job.metadata == {ORIGINAL_PRIORITY_KEY: 2, ORIGINAL_QUEUE_KEY: QUEUE}
    engine.clock.advance(6)
    assert await e.promote_due() == 1
    assert await claim_ids(engine, "target") == [deferred.id]


async def test_control_records_follow_the_operation(backend: BackendHandle) -> None:
    ops = backend.control.batch_operations
    filter = BatchFilter(queue=QUEUE)
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=filter, submitted_by="ops")
    assert op.state == BatchOpState.PENDING and op.submitted_by == "ops"
    assert op.filter == filter and op.spec == PRIORITY_4 and op.total_matched is None
    backend.clock.advance(1)
    second = await ops.create_batch_operation(spec=PRIORITY_4, filter=filter)
    listed = await ops.list_batch_operations()
    assert [o.id for o in listed] == [second.id, op.id]
    assert [o.id for o in await ops.list_batch_operations(state=BatchOpState.PENDING, limit=1)] == [
        second.id
    ]
    assert await ops.get_batch_operation(op.id) == op
    runner = "00000000-0000-4000-8000-000000000001"
    began = await ops.next_batch_operation(runner=runner)
    assert began is not None and began.id == op.id
    assert began.state == BatchOpState.SCANNING and began.started_at is not None
    assert began.runner_instance == runner
    await ops.add_batch_items(op.id, [3, 1, 2])
    await ops.add_batch_items(op.id, [2])
    running = await ops.start_batch_running(op.id, cursor={"after_job_id": 0})
    assert running.state == BatchOpState.RUNNING and running.total_matched == 3
    assert await ops.pending_batch_items(op.id, limit=2) == [1, 2]
    results = [ItemResult(1, ItemOutcome.PROCESSED), ItemResult(2, ItemOutcome.ERRORED, "boom")]
    recorded = await ops.record_batch_items(op.id, results, cursor={"after_job_id": 2})
    again = await ops.record_batch_items(op.id, results, cursor={"after_job_id": 2})
    assert (again.processed, again.errored, again.last_error) == (1, 1, "boom")
    assert recorded.cursor == {"after_job_id": 2}
    cancelling = await ops.cancel_batch_operation(op.id)
    assert cancelling is not None and cancelling.state == BatchOpState.CANCELLING
    assert await ops.cancel_batch_operation(op.id) is None
    done = await ops.finish_batch_operation(
        op.id, state=BatchOpState.CANCELLED, retention=DEFAULT_RETENTION
    )
    assert (done.state, done.processed, done.skipped, done.errored) == (
        BatchOpState.CANCELLED,
        1,
        1,
        1,
    )
    assert done.finalized_at is not None
    assert done.retention_until == done.finalized_at + DEFAULT_RETENTION
    assert await ops.pending_batch_items(op.id, limit=10) == []
    assert await ops.cancel_batch_operation(op.id) is None
    # Only finished operations finalized before the cut-off are purged.
    assert await ops.purge_batch_operations(before=done.finalized_at) == 0
    backend.clock.advance(1)
    assert await ops.purge_batch_operations(before=backend.clock.now()) == 1
    assert await ops.get_batch_operation(op.id) is None
    assert [o.id for o in await ops.list_batch_operations()] == [second.id]


async def test_an_unknown_or_malformed_operation_id_is_answered_alike(
    backend: BackendHandle,
) -> None:
    ops = backend.control.batch_operations
    job_id = 1
    unknown = "00000000-0000-4000-8000-00000000dead"
    assert await ops.get_batch_operation(unknown) is None
    assert await ops.cancel_batch_operation(unknown) is None
    assert await ops.pending_batch_items(unknown, limit=10) == []
    steps: dict[str, Callable[[str], Awaitable[object]]] = {
        "add": lambda op_id: ops.add_batch_items(op_id, [job_id]),
        "add nothing": lambda op_id: ops.add_batch_items(op_id, []),
        "start": lambda op_id: ops.start_batch_running(op_id, cursor={}),
        "record": lambda op_id: ops.record_batch_items(
            op_id, [ItemResult(job_id, ItemOutcome.PROCESSED)], cursor={}
        ),
        "finish": lambda op_id: ops.finish_batch_operation(
            op_id, state=BatchOpState.COMPLETED, retention=DEFAULT_RETENTION
        ),
    }
    for name, step in steps.items():
        with pytest.raises(ValidationError, match="batch operation not found") as found:
            await step(unknown)
        assert found.value.field == "operation_id", name
    reads: dict[str, Callable[[str], Awaitable[object]]] = {
        "get": lambda op_id: ops.get_batch_operation(op_id),
        "cancel": lambda op_id: ops.cancel_batch_operation(op_id),
        "pending": lambda op_id: ops.pending_batch_items(op_id, limit=10),
    }
    for call in {**steps, **reads}.values():
        with pytest.raises(ValidationError, match="invalid batch operation id"):
            await call("not-an-id")
        with pytest.raises(ValidationError, match="invalid batch operation id"):
            await call("")
    assert await ops.list_batch_operations() == []


async def test_an_operation_id_is_found_in_any_spelling(backend: BackendHandle) -> None:
    ops = backend.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    assert str(uuid.UUID(op.id)) == op.id
    assert await ops.get_batch_operation(op.id.upper()) == op
    await ops.next_batch_operation(runner="runner")
    added = await ops.add_batch_items(op.id.upper(), [5])
    assert added.id == op.id
    assert await ops.pending_batch_items(op.id.upper(), limit=10) == [5]


@pytest.mark.parametrize(
    ("runner", "recorded"),
    [
        ("00000000-0000-4000-8000-0000000000AB", "00000000-0000-4000-8000-0000000000ab"),
        ("", None),
        ("leader-1", None),
    ],
)
async def test_the_runner_instance_is_a_uuid_or_nothing(
    backend: BackendHandle, runner: str, recorded: str | None
) -> None:
    ops = backend.control.batch_operations
    await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    began = await ops.next_batch_operation(runner=runner)
    assert began is not None and began.runner_instance == recorded
    assert await ops.get_batch_operation(began.id) == began


async def test_recorded_results_count_once_per_item_and_keep_the_last_error_given(
    backend: BackendHandle,
) -> None:
    ops = backend.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    await ops.next_batch_operation(runner="runner")
    await ops.add_batch_items(op.id, [1, 2, 3])
    await ops.start_batch_running(op.id, cursor={})
    results = [
        ItemResult(3, ItemOutcome.ERRORED, "third"),
        ItemResult(1, ItemOutcome.ERRORED, "first"),
        # named again: the first result given for the item is the one that counts
        ItemResult(3, ItemOutcome.PROCESSED),
        ItemResult(1, ItemOutcome.ERRORED, "first again"),
    ]
    recorded = await ops.record_batch_items(op.id, results, cursor={})
    assert (recorded.processed, recorded.skipped, recorded.errored) == (0, 0, 2)
    assert recorded.last_error == "first"
    assert await ops.pending_batch_items(op.id, limit=10) == [2]
    later = [ItemResult(2, ItemOutcome.PROCESSED), ItemResult(3, ItemOutcome.ERRORED, "late")]
    again = await ops.record_batch_items(op.id, later, cursor={})
    # item 3 was recorded already: its late error counts for nothing
    assert (again.processed, again.errored, again.last_error) == (1, 2, "first")


async def test_a_processed_result_replaces_a_recorded_skip(backend: BackendHandle) -> None:
    """Two runners on one chunk: the one that moved a job records it processed, the other
    found it already moved and records it skipped. Whichever came first, it counts as
    processed; nothing else is recorded over a result."""
    ops = backend.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    await ops.next_batch_operation(runner="runner")
    await ops.add_batch_items(op.id, [1, 2, 3])
    await ops.start_batch_running(op.id, cursor={})
    first = [
        ItemResult(1, ItemOutcome.SKIPPED),
        ItemResult(2, ItemOutcome.PROCESSED),
        ItemResult(3, ItemOutcome.ERRORED, "boom"),
    ]
    recorded = await ops.record_batch_items(op.id, first, cursor={})
    assert (recorded.processed, recorded.skipped, recorded.errored) == (1, 1, 1)
    second = [
        ItemResult(1, ItemOutcome.PROCESSED),
        ItemResult(2, ItemOutcome.SKIPPED),
        ItemResult(3, ItemOutcome.PROCESSED),
    ]
    again = await ops.record_batch_items(op.id, second, cursor={})
    # 1: the move wins over the skip; 2: a skip never replaces a move; 3: an error stays.
    assert (again.processed, again.skipped, again.errored) == (2, 0, 1)
    assert again.last_error == "boom"


async def _run(handle: EngineHandle, runner: BatchRunner) -> None:
    for _ in range(200):
        if not await runner.step():
            return
    raise AssertionError("the runner did not finish")


async def test_the_runner_completes_an_operation(engine: EngineHandle) -> None:
    ops = engine.control.batch_operations
    jobs = [await enqueue(engine) for _ in range(7)]
    claimed = await claim_one(engine)
    await enqueue(engine, queue="elsewhere")
    op = await ops.create_batch_operation(
        spec=BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target", priority=3),
        filter=BatchFilter(queue=QUEUE),
    )
    await _run(
        engine,
        BatchRunner(engine.engine, ops, runner_id="runner", clock=SystemClock(), chunk_size=3),
    )
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done.state == BatchOpState.COMPLETED
    assert (done.total_matched, done.processed, done.skipped, done.errored) == (6, 6, 0, 0)
    assert done.cursor is not None and done.cursor["max_job_id"] == jobs[-1].id
    moved = [await fetch(engine, j.id) for j in jobs if j.id != claimed.job.id]
    assert {(j.queue, j.priority) for j in moved} == {("target", 3)}
    assert (await fetch(engine, claimed.job.id)).queue == QUEUE


async def test_the_runner_stops_at_a_chunk_boundary_when_cancelled(
    engine: EngineHandle,
) -> None:
    e, ops = engine.engine, engine.control.batch_operations
    for _ in range(6):
        await enqueue(engine)
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    runner = BatchRunner(e, ops, runner_id="runner", clock=SystemClock(), chunk_size=2, budget=0.0)
    # Scans and applies the first chunk's first change: the budget is spent before the
    # second starts, which stays pending.
    assert await runner.step()
    assert await ops.cancel_batch_operation(op.id) is not None
    await _run(engine, runner)
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done.state == BatchOpState.CANCELLED
    assert (done.total_matched, done.processed, done.skipped) == (6, 1, 5)
    priorities = sorted(j.priority for j in await e.list_batch_targets(BatchFilter(), limit=10))
    assert priorities == [2, 2, 2, 2, 2, 4]


class _AfterChanges:
    """An engine that runs ``then`` once its ``count``-th change is applied: the runner's
    (manual) clock moved on, as by a slow change, or a leader's duty scope cancelled, as
    by a lease that ran out while the rest of the chunk waits its turn."""

    def __init__(self, engine: StorageEngine, count: int, then: Callable[[], object]) -> None:
        self._engine = engine
        self._left = count
        self._then = then

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        result = await self._engine.apply_batch_change(job_id, spec)
        self._left -= 1
        if self._left == 0:
            self._then()
        return result


async def test_a_pass_stops_inside_a_chunk_once_its_budget_is_spent(
    engine: EngineHandle,
) -> None:
    """The budget is looked at before each change, not only between chunks: a chunk whose
    second change used up the pass's time starts no third; the rest stay pending for the
    next pass, and the operation still ends with every job moved once."""
    ops = engine.control.batch_operations
    jobs = [await enqueue(engine) for _ in range(5)]
    op = await ops.create_batch_operation(
        spec=BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target"), filter=BatchFilter(queue=QUEUE)
    )
    clock = ManualClock()
    slow = cast(StorageEngine, _AfterChanges(engine.engine, 2, lambda: clock.advance(2.0)))
    runner = BatchRunner(
        slow, ops, runner_id="r", clock=clock, chunk_size=5, budget=1.0, parallelism=1
    )
    assert await runner.step()
    part = await ops.get_batch_operation(op.id)
    assert part is not None and (part.processed, part.skipped) == (2, 0)
    assert await ops.pending_batch_items(op.id, limit=10) == [j.id for j in jobs[2:]]
    await _run(engine, runner)
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done.state == BatchOpState.COMPLETED
    assert (done.total_matched, done.processed, done.skipped, done.errored) == (5, 5, 0, 0)
    assert {(await fetch(engine, j.id)).queue for j in jobs} == {"target"}


async def test_changes_a_cut_off_chunk_made_count_as_processed(engine: EngineHandle) -> None:
    """A step cut off part way through a chunk records what it changed: the next pass
    does not apply those changes again and count the moved jobs as skipped."""
    ops = engine.control.batch_operations
    jobs = [await enqueue(engine) for _ in range(5)]
    op = await ops.create_batch_operation(
        spec=BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target"), filter=BatchFilter(queue=QUEUE)
    )
    # The runner's budget is on a clock only the test moves, and it never does: the lease
    # running out is what stops the step, however long the host takes over each change.
    clock = ManualClock()
    with anyio.CancelScope() as lease:
        cut = _AfterChanges(engine.engine, 3, lease.cancel)
        runner = BatchRunner(
            cast(StorageEngine, cut), ops, runner_id="r", clock=clock, parallelism=1
        )
        await runner.step()
    assert lease.cancelled_caught
    part = await ops.get_batch_operation(op.id)
    assert part is not None and (part.processed, part.skipped) == (3, 0)
    assert await ops.pending_batch_items(op.id, limit=10) == [j.id for j in jobs[3:]]
    await _run(engine, BatchRunner(engine.engine, ops, runner_id="r", clock=clock))
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done.state == BatchOpState.COMPLETED
    assert (done.total_matched, done.processed, done.skipped, done.errored) == (5, 5, 0, 0)
    assert {(await fetch(engine, j.id)).queue for j in jobs} == {"target"}


async def test_a_cancelled_pending_operation_never_runs(engine: EngineHandle) -> None:
    ops = engine.control.batch_operations
    job = await enqueue(engine)
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter())
    await ops.cancel_batch_operation(op.id)
    await _run(engine, BatchRunner(engine.engine, ops, runner_id="runner", clock=SystemClock()))
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done.state == BatchOpState.CANCELLED
    assert done.total_matched is None and done.processed == 0
    assert (await fetch(engine, job.id)).priority == 2


# ---------------------------------------------------------------- final states are final
# Two maintenance leaders may overlap briefly (one losing the lock while it still finishes
# a step): a late step on an operation the other has finished changes nothing of it.


async def _finished(handle: BackendHandle, state: BatchOpState) -> BatchOperation:
    """An operation run over items 1..3 (one processed), finished in ``state``."""
    ops = handle.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    began = await ops.next_batch_operation(runner="runner")
    assert began is not None and began.id == op.id
    await ops.add_batch_items(op.id, [1, 2, 3])
    await ops.start_batch_running(op.id, cursor={"after_job_id": 0, "max_job_id": 3})
    await ops.record_batch_items(
        op.id, [ItemResult(1, ItemOutcome.PROCESSED)], cursor={"after_job_id": 1, "max_job_id": 3}
    )
    handle.clock.advance(1)
    error = "RuntimeError: first" if state == BatchOpState.FAILED else None
    done = await ops.finish_batch_operation(
        op.id, state=state, last_error=error, retention=DEFAULT_RETENTION
    )
    assert (done.state, done.processed, done.skipped, done.last_error) == (state, 1, 2, error)
    handle.clock.advance(1)
    return done


async def test_a_finished_operation_is_not_finished_again(backend: BackendHandle) -> None:
    ops = backend.control.batch_operations
    for state in sorted(FINAL_STATES):
        done = await _finished(backend, state)
        for again in sorted(FINAL_STATES):
            late = await ops.finish_batch_operation(
                done.id, state=again, last_error="RuntimeError: late", retention=timedelta(0)
            )
            assert late == done, (state, again)
        assert await ops.get_batch_operation(done.id) == done
        assert await ops.pending_batch_items(done.id, limit=10) == []


async def test_finishing_into_a_state_that_is_not_final_is_refused(backend: BackendHandle) -> None:
    ops = backend.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    for state in sorted(set(BatchOpState) - FINAL_STATES):
        with pytest.raises(ValidationError, match="finishes completed, cancelled or failed"):
            await ops.finish_batch_operation(op.id, state=state, retention=timedelta(0))
    assert await ops.get_batch_operation(op.id) == op


async def test_a_late_start_leaves_a_finished_operation_as_it_is(backend: BackendHandle) -> None:
    ops = backend.control.batch_operations
    for state in sorted(FINAL_STATES):
        done = await _finished(backend, state)
        late = await ops.start_batch_running(done.id, cursor={"after_job_id": 0, "max_job_id": 9})
        assert late == done, state
        assert await ops.get_batch_operation(done.id) == done
        assert await ops.next_batch_operation(runner="runner") is None


async def test_a_late_scan_page_adds_nothing_to_a_finished_operation(
    backend: BackendHandle,
) -> None:
    ops = backend.control.batch_operations
    for state in sorted(FINAL_STATES):
        done = await _finished(backend, state)
        assert await ops.add_batch_items(done.id, [4, 5]) == done, state
        assert await ops.pending_batch_items(done.id, limit=10) == []
        late = await ops.record_batch_items(
            done.id, [ItemResult(4, ItemOutcome.PROCESSED)], cursor={"after_job_id": 4}
        )
        assert late == done, state
        assert await ops.get_batch_operation(done.id) == done


async def test_a_late_start_leaves_a_pending_operation_pending(backend: BackendHandle) -> None:
    """Only a scan ends in ``running``: an operation no runner has claimed stays pending."""
    ops = backend.control.batch_operations
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    backend.clock.advance(1)
    assert await ops.start_batch_running(op.id, cursor={}) == op
    began = await ops.next_batch_operation(runner="runner")
    assert began is not None and began.state == BatchOpState.SCANNING


class _Meanwhile:
    """The engine and the operation store as a leader sees them while another leader
    finishes its operation: the first ``step`` call made finishes the operation ``state``
    (kept as ``finished``) a second before it is answered."""

    def __init__(self, handle: EngineHandle, step: str, state: BatchOpState) -> None:
        self._engine = handle.engine
        self._store = handle.control.batch_operations
        self._clock = handle.clock
        self._step = step
        self._state = state
        self._op_id: str | None = None
        self.finished: BatchOperation | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store if hasattr(self._store, name) else self._engine, name)

    async def next_batch_operation(self, *, runner: str) -> BatchOperation | None:
        op = await self._store.next_batch_operation(runner=runner)
        if op is not None and self._op_id is None:
            self._op_id = op.id
        return op

    async def _other_leader(self, name: str) -> None:
        if name == self._step and self._op_id is not None and self.finished is None:
            self.finished = await self._store.finish_batch_operation(
                self._op_id, state=self._state, retention=DEFAULT_RETENTION
            )
            self._clock.advance(1)

    async def list_batch_targets(self, *args: Any, **kwargs: Any) -> list[Any]:
        await self._other_leader("scan")
        return await self._engine.list_batch_targets(*args, **kwargs)

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        await self._other_leader("apply")
        return await self._engine.apply_batch_change(job_id, spec)


@pytest.mark.parametrize(
    ("step", "state", "changed"),
    [
        ("scan", BatchOpState.CANCELLED, 0),
        ("scan", BatchOpState.FAILED, 0),
        # the chunk in hand is still applied; nothing after it
        ("apply", BatchOpState.CANCELLED, 2),
        ("apply", BatchOpState.COMPLETED, 2),
    ],
)
async def test_a_leader_stops_on_an_operation_another_leader_finished(
    engine: EngineHandle, step: str, state: BatchOpState, changed: int
) -> None:
    e, ops = engine.engine, engine.control.batch_operations
    for _ in range(6):
        await enqueue(engine)
    op = await ops.create_batch_operation(spec=PRIORITY_4, filter=BatchFilter(queue=QUEUE))
    meanwhile = _Meanwhile(engine, step, state)
    runner = BatchRunner(
        cast(StorageEngine, meanwhile),
        cast(BatchOperationStore, meanwhile),
        runner_id="runner",
        clock=SystemClock(),
        chunk_size=2,
        parallelism=1,
        # No budget to run out on a busy host: the chunk in hand is applied whole.
        budget=math.inf,
    )
    assert await runner.step()
    assert not await runner.step()
    done = await ops.get_batch_operation(op.id)
    assert done is not None and done == meanwhile.finished
    assert (done.state, done.processed, done.last_error) == (state, 0, None)
    assert await ops.pending_batch_items(op.id, limit=10) == []
    priorities = sorted(j.priority for j in await e.list_batch_targets(BatchFilter(), limit=10))
    assert priorities == [2] * (6 - changed) + [4] * changed
