"""The batch-operation store: the operations operators submit and the leader's runner
drives (``awa.batch_operations`` / ``awa.batch_operation_items`` on Postgres; ADR 0010).

One store serves a whole backend: the operations are shared by every storage engine of
a database, while the jobs an operation changes are each engine's own (the batch targets
of :class:`~awa.ports.storage.StorageEngine`). ``tests/contract/test_batch_ops.py`` is the
executable form of these docstrings.

An operation id is a UUID in any spelling (answered in the one of
``batch_ops.parse_operation_id``; anything else raises ``ValidationError``). A runner step
(add / start / record / finish) naming an operation that does not exist raises
``ValidationError`` (``batch_ops.operation_not_found``). A step writes an operation only in
a state it may move from (``batch_ops.may_move``), checked in the same atomic write: a
final state (completed, cancelled, failed) is absorbing, so a late step on a finished
operation (a leader that lost the lock while another finished it) changes nothing, raises
nothing and answers with the operation as it is, its state final.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from awa.domain.batch_ops import (
    BatchFilter,
    BatchOperation,
    BatchOpState,
    BatchSpec,
    ItemResult,
)


@runtime_checkable
class BatchOperationStore(Protocol):
    async def create_batch_operation(
        self, *, spec: BatchSpec, filter: BatchFilter, submitted_by: str | None = None
    ) -> BatchOperation:
        """Store a new ``pending`` operation with a fresh UUID, submitted now."""
        ...

    async def get_batch_operation(self, op_id: str) -> BatchOperation | None:
        """The operation with id ``op_id``, or ``None`` when there is none."""
        ...

    async def list_batch_operations(
        self, *, state: BatchOpState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        """Operations newest (``submitted_at``) first, optionally in one state."""
        ...

    async def cancel_batch_operation(self, op_id: str) -> BatchOperation | None:
        """Ask an active operation to stop (state ``cancelling``; the runner finishes it at
        its next chunk boundary). ``None`` if it is missing or already finished/cancelling."""
        ...

    async def purge_batch_operations(self, *, before: datetime, limit: int = 1000) -> int:
        """Delete at most ``limit`` finished operations (and their items) finalized before
        ``before``; returns how many."""
        ...

    async def next_batch_operation(self, *, runner: str) -> BatchOperation | None:
        """The oldest unfinished operation for the runner; a ``pending`` one becomes
        ``scanning`` with ``started_at = now`` and ``runner_instance`` =
        ``batch_ops.runner_instance(runner)`` (the runner's UUID, or ``None``)."""
        ...

    async def add_batch_items(self, op_id: str, job_ids: Sequence[int]) -> BatchOperation:
        """Snapshot job ids into the operation's items (``pending``; idempotent); returns
        the operation. A finished one gets no items (it has none pending, ever)."""
        ...

    async def start_batch_running(self, op_id: str, *, cursor: dict[str, Any]) -> BatchOperation:
        """End the scan: ``total_matched`` = the item count, state ``running`` (or stay
        ``cancelling``; ``batch_ops.after_scan``). An operation no runner has claimed
        (``pending``) or a finished one is returned unchanged."""
        ...

    async def pending_batch_items(self, op_id: str, *, limit: int) -> list[int]:
        """The next ``limit`` pending item job ids, lowest first."""
        ...

    async def record_batch_items(
        self, op_id: str, results: Sequence[ItemResult], *, cursor: dict[str, Any]
    ) -> BatchOperation:
        """Mark items done and add them to the processed / skipped / errored counts;
        returns the operation as it now is (a cancel may be waiting). Only the first result
        given for an item counts (``batch_ops.first_results``), and only for an item still
        pending, or over a recorded outcome it replaces (``batch_ops.replaces``: a
        ``processed`` over a ``skipped``, the counts moving with it); of those, the last
        error given becomes ``last_error``. A finished
        operation is returned unchanged (its cursor too)."""
        ...

    async def finish_batch_operation(
        self,
        op_id: str,
        *,
        state: BatchOpState,
        last_error: str | None = None,
        retention: timedelta,
    ) -> BatchOperation:
        """Finalize in ``state``: ``finalized_at = now``, ``retention_until = now +
        retention``, ``last_error`` if given. Items still pending are marked and counted
        ``skipped`` (a cancelled operation). An operation already finished keeps its first
        finish (state, ``finalized_at``, ``retention_until``, ``last_error``) and is
        returned as it is: a caller sees from the answer's state (or a ``finalized_at``
        before now) that another step finished it."""
        ...
