"""Async client methods for durable batch operations (``set_priority``, ``move_queue``).

Submitting only records the operation; the maintenance leader of a running worker
executes it (``awa.runtime.batch_runner``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from awa.domain.batch_ops import (
    PREVIEW_SAMPLE,
    BatchFilter,
    BatchOpState,
    BatchSpec,
    check_applicable,
    operation_not_found,
    parse_filter,
    parse_operation_id,
    parse_spec,
    require_scope,
)
from awa.domain.batch_ops import BatchOperation as BatchRecord
from awa.domain.errors import ValidationError
from awa.entrypoints.client_admin import job_dict
from awa.entrypoints.client_core import ClientCore
from awa.entrypoints.results import (
    BatchOperation,
    BatchOperationFilter,
    BatchOperationKind,
    BatchOperationPreview,
    BatchOperationState,
)


def _utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def operation_dict(op: BatchRecord) -> BatchOperation:
    """The JSON form of an operation (``BatchOperation`` TypedDict)."""
    return BatchOperation(
        id=op.id,
        op_kind=str(op.op_kind),
        filter=op.filter.to_json(),
        spec=op.spec.to_json(),
        state=str(op.state),
        submitted_by=op.submitted_by,
        submitted_at=cast(str, _utc(op.submitted_at)),
        started_at=_utc(op.started_at),
        finalized_at=_utc(op.finalized_at),
        cursor=op.cursor,
        total_matched=op.total_matched,
        processed=op.processed,
        skipped=op.skipped,
        errored=op.errored,
        last_error=op.last_error,
        runner_instance=op.runner_instance,
        retention_until=_utc(op.retention_until),
        updated_at=cast(str, _utc(op.updated_at)),
    )


def _parse(
    op_kind: Any, spec: dict[str, Any] | None, filter: BatchOperationFilter | None
) -> tuple[BatchSpec, BatchFilter]:
    parsed_spec = parse_spec(op_kind, spec)
    parsed_filter = parse_filter(cast("dict[str, Any] | None", filter))
    check_applicable(parsed_spec, parsed_filter)
    return parsed_spec, parsed_filter


class BatchOpsMixin(ClientCore):
    """Preview, submit, inspect, cancel and purge batch operations."""

    async def preview_batch_operation(
        self,
        op_kind: BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: BatchOperationFilter | None = None,
    ) -> BatchOperationPreview:
        """How many queued jobs the operation would touch now, and the first few of them
        (advisory: execution snapshots the targets again when it starts)."""
        _, parsed = _parse(op_kind, spec, filter)
        engine = await self._engine()
        total = await engine.count_batch_targets(parsed)
        sample = await engine.list_batch_targets(parsed, limit=PREVIEW_SAMPLE)
        return BatchOperationPreview(total_matched=total, sample=[job_dict(j) for j in sample])

    async def submit_batch_operation(
        self,
        op_kind: BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Record a ``pending`` operation for the maintenance leader to run. A filter that
        narrows nothing needs ``allow_all=True``."""
        parsed_spec, parsed_filter = _parse(op_kind, spec, filter)
        require_scope(parsed_filter, allow_all)
        if submitted_by is not None and not isinstance(submitted_by, str):
            raise TypeError(f"submitted_by: expected a string, got {type(submitted_by).__name__}")
        record = await (await self._control()).batch_operations.create_batch_operation(
            spec=parsed_spec, filter=parsed_filter, submitted_by=submitted_by
        )
        return operation_dict(record)

    async def preview_set_priority(
        self, priority: int, *, filter: BatchOperationFilter | None = None
    ) -> BatchOperationPreview:
        """Preview :meth:`set_priority`."""
        return await self.preview_batch_operation(
            "set_priority", spec={"priority": priority}, filter=filter
        )

    async def set_priority(
        self,
        priority: int,
        *,
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Submit an operation giving queued jobs ``priority`` (1..4); each changed job
        records its first priority in metadata ``_awa_original_priority``."""
        return await self.submit_batch_operation(
            "set_priority",
            spec={"priority": priority},
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    async def preview_move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: BatchOperationFilter | None = None,
    ) -> BatchOperationPreview:
        """Preview :meth:`move_queue`."""
        return await self.preview_batch_operation(
            "move_queue", spec=_move_spec(queue, priority), filter=filter
        )

    async def move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Submit an operation moving queued jobs to ``queue`` (optionally with a new
        priority); each moved job records ``_awa_original_queue``."""
        return await self.submit_batch_operation(
            "move_queue",
            spec=_move_spec(queue, priority),
            filter=filter,
            submitted_by=submitted_by,
            allow_all=allow_all,
        )

    async def list_batch_operations(
        self, *, state: BatchOperationState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        """Operations, newest first, optionally in one state."""
        wanted = None if state is None else BatchOpState.parse(state)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit: expected an integer, got {type(limit).__name__}")
        ops = await (await self._control()).batch_operations.list_batch_operations(
            state=wanted, limit=limit
        )
        return [operation_dict(op) for op in ops]

    async def get_batch_operation(self, operation_id: str) -> BatchOperation:
        """One operation by id; ``ValidationError`` if there is none."""
        op_id = parse_operation_id(operation_id)
        op = await (await self._control()).batch_operations.get_batch_operation(op_id)
        if op is None:
            raise operation_not_found(op_id)
        return operation_dict(op)

    async def cancel_batch_operation(self, operation_id: str) -> BatchOperation:
        """Ask an unfinished operation to stop; the runner ends it ``cancelled`` at its next
        chunk boundary (jobs already changed stay changed)."""
        op_id = parse_operation_id(operation_id)
        op = await (await self._control()).batch_operations.cancel_batch_operation(op_id)
        if op is None:
            raise ValidationError(
                "operation_id",
                f"batch operation cannot be cancelled: {op_id} (missing or already finished)",
            )
        return operation_dict(op)

    async def purge_batch_operations(self, before: datetime, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished operations finalized before ``before``."""
        if not isinstance(before, datetime):
            raise TypeError(f"before: expected a datetime, got {type(before).__name__}")
        if before.tzinfo is None:
            raise TypeError("before: expected a datetime with non-None tzinfo")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit: expected an integer, got {type(limit).__name__}")
        return await (await self._control()).batch_operations.purge_batch_operations(
            before=before, limit=limit
        )


def _move_spec(queue: str, priority: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": queue}
    if priority is not None:
        spec["priority"] = priority
    return spec
