"""Batch operations in memory: the engine's targets and per-job change, and the store of
the operations (the model of ``awa.batch_operations`` / ``awa.batch_operation_items``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters.inmemory.base import EngineBase
from awa.domain.batch_ops import (
    ACTIVE_STATES,
    FINAL_STATES,
    BatchFilter,
    BatchOperation,
    BatchOpState,
    BatchSpec,
    ItemOutcome,
    ItemResult,
    after_scan,
    batch_change,
    cancel_requested,
    finishing_state,
    first_results,
    may_move,
    operation_not_found,
    parse_operation_id,
    replaces,
    runner_instance,
)
from awa.domain.channels import queue_channel
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.ports.clock import Clock

_PENDING = "pending"


class BatchOps(EngineBase):
    """The engine's batch targets and per-job changes, one atomic write each."""

    # ---------------------------------------------------------------- targets
    def _targets(self, filter: BatchFilter) -> list[JobRecord]:
        found = [job for job in self._read().jobs.values() if filter.matches(job)]
        return sorted(found, key=lambda job: job.id)

    async def count_batch_targets(self, filter: BatchFilter) -> int:
        return len(self._targets(filter))

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        return [job for job in self._targets(filter) if job.id > after_id][: max(limit, 0)]

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        async with self._write() as write:
            job = write.state.jobs.get(job_id)
            if job is None:
                return ItemResult(job_id, ItemOutcome.MISSING)
            new = batch_change(job, spec)
            if new is None:
                return ItemResult(job_id, ItemOutcome.SKIPPED)
            # The job keeps its run_at and id, so within its new lane it is claimed in the
            # same (run_at, id) order as every other job there.
            write.state.update(job, priority=new.priority, queue=new.queue, metadata=new.metadata)
            if new.state == JobState.Available:
                write.notify.add(queue_channel(new.queue))
        return ItemResult(job_id, ItemOutcome.PROCESSED)


class InMemoryBatchOperationStore:
    """:class:`~awa.ports.batch_ops.BatchOperationStore` in process memory: operations and
    their item states (job id -> item state), by operation id. Each step is one
    synchronous change, so it is atomic on the event loop."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._batch_ops: dict[str, BatchOperation] = {}
        self._batch_items: dict[str, dict[int, str]] = {}

    def _op(self, op_id: str) -> BatchOperation:
        """The operation a runner step names (raises if there is none)."""
        op_id = parse_operation_id(op_id)
        op = self._batch_ops.get(op_id)
        if op is None:
            raise operation_not_found(op_id)
        return op

    def _put(self, op: BatchOperation, **changes: Any) -> BatchOperation:
        updated = attrs.evolve(op, updated_at=self._clock.now(), **changes)
        self._batch_ops[op.id] = updated
        return updated

    async def create_batch_operation(
        self, *, spec: BatchSpec, filter: BatchFilter, submitted_by: str | None = None
    ) -> BatchOperation:
        now = self._clock.now()
        op = BatchOperation(
            id=str(uuid.uuid4()),
            op_kind=spec.op_kind,
            filter=filter,
            spec=spec,
            state=BatchOpState.PENDING,
            submitted_by=submitted_by,
            submitted_at=now,
            updated_at=now,
        )
        self._batch_ops[op.id] = op
        self._batch_items[op.id] = {}
        return op

    async def get_batch_operation(self, op_id: str) -> BatchOperation | None:
        return self._batch_ops.get(parse_operation_id(op_id))

    async def list_batch_operations(
        self, *, state: BatchOpState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        found = [op for op in self._batch_ops.values() if state is None or op.state == state]
        found.sort(key=lambda op: (op.submitted_at, op.id), reverse=True)
        return found[: max(limit, 0)]

    async def cancel_batch_operation(self, op_id: str) -> BatchOperation | None:
        op = self._batch_ops.get(parse_operation_id(op_id))
        target = None if op is None else cancel_requested(op.state)
        if op is None or target is None:
            return None
        return self._put(op, state=target)

    async def purge_batch_operations(self, *, before: datetime, limit: int = 1000) -> int:
        doomed = sorted(
            (
                op
                for op in self._batch_ops.values()
                if op.state in FINAL_STATES
                and op.finalized_at is not None
                and op.finalized_at < before
            ),
            key=lambda op: (op.finalized_at, op.id),
        )[: max(limit, 0)]
        for op in doomed:
            del self._batch_ops[op.id]
            self._batch_items.pop(op.id, None)
        return len(doomed)

    async def next_batch_operation(self, *, runner: str) -> BatchOperation | None:
        active = [op for op in self._batch_ops.values() if op.state in ACTIVE_STATES]
        if not active:
            return None
        op = min(active, key=lambda op: (op.submitted_at, op.id))
        if op.state == BatchOpState.PENDING:
            op = self._put(
                op,
                state=BatchOpState.SCANNING,
                started_at=self._clock.now(),
                runner_instance=runner_instance(runner),
            )
        return op

    async def add_batch_items(self, op_id: str, job_ids: Sequence[int]) -> BatchOperation:
        op = self._op(op_id)
        if not may_move(op.state, op.state):
            return op
        items = self._batch_items.setdefault(op.id, {})
        for job_id in job_ids:
            items.setdefault(job_id, _PENDING)
        return op

    async def start_batch_running(self, op_id: str, *, cursor: dict[str, Any]) -> BatchOperation:
        op = self._op(op_id)
        target = after_scan(op.state)
        if not may_move(op.state, target):
            return op
        total = len(self._batch_items.get(op.id, {}))
        return self._put(op, state=target, total_matched=total, cursor=cursor)

    async def pending_batch_items(self, op_id: str, *, limit: int) -> list[int]:
        items = self._batch_items.get(parse_operation_id(op_id), {})
        return sorted(job_id for job_id, s in items.items() if s == _PENDING)[: max(limit, 0)]

    async def record_batch_items(
        self, op_id: str, results: Sequence[ItemResult], *, cursor: dict[str, Any]
    ) -> BatchOperation:
        op = self._op(op_id)
        if not may_move(op.state, op.state):
            return op
        items = self._batch_items.setdefault(op.id, {})
        counts = {ItemOutcome.PROCESSED: 0, ItemOutcome.SKIPPED: 0, ItemOutcome.ERRORED: 0}
        last_error = op.last_error
        for result in first_results(results):
            recorded = items.get(result.job_id)
            if recorded is None:
                continue
            was = None if recorded == _PENDING else ItemOutcome(recorded)
            if not replaces(was, result.outcome):
                continue
            items[result.job_id] = str(result.outcome)
            counts[result.outcome] += 1
            if was is not None:
                counts[was] -= 1
            if result.error is not None:
                last_error = result.error
        return self._put(
            op,
            processed=op.processed + counts[ItemOutcome.PROCESSED],
            skipped=op.skipped + counts[ItemOutcome.SKIPPED],
            errored=op.errored + counts[ItemOutcome.ERRORED],
            last_error=last_error,
            cursor=cursor,
        )

    async def finish_batch_operation(
        self,
        op_id: str,
        *,
        state: BatchOpState,
        last_error: str | None = None,
        retention: timedelta,
    ) -> BatchOperation:
        state = finishing_state(state)
        op = self._op(op_id)
        if not may_move(op.state, state):
            return op
        items = self._batch_items.setdefault(op.id, {})
        left = [job_id for job_id, s in items.items() if s == _PENDING]
        for job_id in left:
            items[job_id] = str(ItemOutcome.SKIPPED)
        now = self._clock.now()
        return self._put(
            op,
            state=state,
            skipped=op.skipped + len(left),
            last_error=op.last_error if last_error is None else last_error,
            finalized_at=now,
            retention_until=now + retention,
        )
