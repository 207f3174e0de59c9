"""The batch-operation runner: a maintenance-leader duty that drives each operation
``pending -> scanning -> running -> completed | cancelled | failed``.

Scanning snapshots the ids of the targeted jobs into the operation's items; running
applies the change one job at a time (each its own transaction, so a change never waits
behind a whole chunk) and records the outcomes chunk by chunk. The pass's time budget is
looked at before each change starts: once it is spent the chunk stops part way, its
changes in flight finishing and the rest left pending. A chunk cut off part way (the
lease ran out under it) records the changes it made before it stops, so they count as
processed. Cancellation is looked at between chunks. A leader that dies mid-operation
leaves it ``scanning`` or ``running``; the next leader picks it up where the items say (a
change applied twice is a no-op: the job is already where the operation puts it, so it
counts as skipped, unless the runner that moved it records it processed, which wins:
``batch_ops.replaces``). Two leaders may overlap briefly (one losing the lock while it
still works a step): a finished operation is final (``batch_ops.may_move``), so the late
leader's steps change nothing of it, and it stops as soon as a step answers with the
operation finished.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import anyio

from awa.domain.batch_ops import (
    CHUNK_SIZE,
    DEFAULT_RETENTION,
    BatchOperation,
    BatchOpState,
    ItemOutcome,
    ItemResult,
    after_scan,
    final_state,
)
from awa.domain.errors import AwaError, DatabaseError
from awa.ports.batch_ops import BatchOperationStore
from awa.ports.clock import Clock
from awa.ports.storage import StorageEngine

log = logging.getLogger("awa.runtime.batch_runner")

#: How often the leader looks for batch operations.
BATCH_OPERATION_INTERVAL = 1.0
#: How long one pass may work before the leader's other duties get their turn.
STEP_BUDGET = 0.5
#: How many target ids one scan round trip reads.
SCAN_PAGE = 1000
#: How many per-job changes are in flight at once (each holds a pooled connection).
PARALLELISM = 4
#: How long a chunk cut off part way may take to record the changes it made.
RECORD_GRACE = 5.0


class BatchRunner:
    """Advances the oldest unfinished batch operation a bounded step at a time: the
    operations live in ``store``, the jobs they change in ``engine``."""

    def __init__(
        self,
        engine: StorageEngine,
        store: BatchOperationStore,
        *,
        runner_id: str,
        clock: Clock,
        retention: timedelta = DEFAULT_RETENTION,
        chunk_size: int = CHUNK_SIZE,
        budget: float = STEP_BUDGET,
        parallelism: int = PARALLELISM,
    ) -> None:
        self._engine = engine
        self._store = store
        self._runner_id = runner_id
        self._clock = clock
        self._retention = retention
        self._chunk = chunk_size
        self._budget = budget
        self._parallelism = max(1, parallelism)

    async def step(self) -> bool:
        """Work on the oldest unfinished operation for up to the budget. Returns whether
        more work may be waiting (call again soon) or none was found."""
        op = await self._store.next_batch_operation(runner=self._runner_id)
        if op is None:
            return False
        deadline = self._clock.monotonic() + self._budget
        try:
            if op.state == BatchOpState.SCANNING:
                op = await self._scan(op)
            while True:
                if op.state.is_final:
                    # Another leader finished it meanwhile; its finish stands.
                    log.info("batch operation %s already %s", op.id, op.state)
                    return True
                ids = (
                    await self._store.pending_batch_items(op.id, limit=self._chunk)
                    if op.state == BatchOpState.RUNNING
                    else []
                )
                done = final_state(op.state, items_left=bool(ids))
                if done is not None:
                    await self._finish(op, done)
                    return True
                op = await self._run_chunk(op, ids, deadline)
                if self._clock.monotonic() >= deadline:
                    return True
        except DatabaseError:
            # Postgres is unreachable or restarting: leave the operation where it is; the
            # next pass resumes from its items.
            raise
        except Exception as exc:
            log.exception("batch operation %s failed", op.id)
            await self._store.finish_batch_operation(
                op.id,
                state=BatchOpState.FAILED,
                last_error=f"{type(exc).__name__}: {exc}",
                retention=self._retention,
            )
            return True

    async def _scan(self, op: BatchOperation) -> BatchOperation:
        after = 0
        while True:
            page = await self._engine.list_batch_targets(op.filter, after_id=after, limit=SCAN_PAGE)
            if page:
                after = page[-1].id
                op = await self._store.add_batch_items(op.id, [job.id for job in page])
            if op.state.is_final:
                return op
            if len(page) < SCAN_PAGE or op.state == BatchOpState.CANCELLING:
                break
        log.info("batch operation %s scanned (%s)", op.id, after_scan(op.state))
        return await self._store.start_batch_running(
            op.id, cursor={"after_job_id": 0, "max_job_id": after}
        )

    async def _run_chunk(
        self, op: BatchOperation, ids: list[int], deadline: float
    ) -> BatchOperation:
        """Apply a chunk and record its outcomes. No change starts once the pass's budget
        is spent (``deadline``): the changes in flight finish, the rest stay pending for
        the next pass, so a pass overruns its budget by one change, never by a chunk. A
        chunk cut off part way (the leader's lease ran out, or Postgres failed under one
        change) still records the changes that committed before it stops: left pending,
        they would be applied again by the next pass, find their job already moved and
        count as skipped."""
        results: dict[int, ItemResult] = {}
        try:
            await self._apply_chunk(op, ids, results, deadline)
        except BaseException:
            if results:
                with anyio.CancelScope(shield=True), self._clock.move_on_after(RECORD_GRACE):
                    await self._record(op, ids, results)
            raise
        return await self._record(op, ids, results)

    async def _record(
        self, op: BatchOperation, ids: list[int], results: dict[int, ItemResult]
    ) -> BatchOperation:
        done = [results[job_id] for job_id in ids if job_id in results]
        if not done:
            return op
        return await self._store.record_batch_items(
            op.id, done, cursor=_cursor(op, after=done[-1].job_id)
        )

    async def _apply_chunk(
        self,
        op: BatchOperation,
        ids: list[int],
        results: dict[int, ItemResult],
        deadline: float,
    ) -> None:
        """Apply a chunk with up to ``parallelism`` changes in flight (each its own
        transaction), each result into ``results`` as soon as its change is done; a
        change whose turn comes after ``deadline`` is not started (the chunk's first
        always is)."""
        limiter = anyio.CapacityLimiter(self._parallelism)
        started = 0

        async def one(job_id: int) -> None:
            nonlocal started
            async with limiter:
                # The first change always starts, so every pass moves the operation on.
                if started and self._clock.monotonic() >= deadline:
                    return
                started += 1
                results[job_id] = await self._apply(op, job_id)

        async with anyio.create_task_group() as group:
            for job_id in ids:
                group.start_soon(one, job_id)

    async def _apply(self, op: BatchOperation, job_id: int) -> ItemResult:
        try:
            result = await self._engine.apply_batch_change(job_id, op.spec)
        except DatabaseError:
            raise
        except AwaError as exc:
            log.warning("batch operation %s: job %s not changed: %s", op.id, job_id, exc)
            return ItemResult(job_id, ItemOutcome.ERRORED, f"job {job_id}: {exc}")
        if result.outcome == ItemOutcome.MISSING:
            # Deleted (or finished and cleaned up) since the scan.
            return ItemResult(job_id, ItemOutcome.SKIPPED)
        return result

    async def _finish(self, op: BatchOperation, state: BatchOpState) -> None:
        done = await self._store.finish_batch_operation(
            op.id, state=state, retention=self._retention
        )
        if done.state != state:
            log.info("batch operation %s already %s", done.id, done.state)
            return
        log.info(
            "batch operation %s %s %s: %s processed, %s skipped, %s errored of %s",
            done.id,
            done.op_kind,
            done.state,
            done.processed,
            done.skipped,
            done.errored,
            done.total_matched,
        )


def _cursor(op: BatchOperation, *, after: int) -> dict[str, Any]:
    prior = op.cursor or {}
    return {"after_job_id": after, "max_job_id": prior.get("max_job_id")}
