"""The blocking client's batch-operation methods (same names as on ``AsyncClient``)."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.results import (
    BatchOperation,
    BatchOperationFilter,
    BatchOperationKind,
    BatchOperationPreview,
    BatchOperationState,
)

R = TypeVar("R")


class SyncBatchOpsMixin:
    """Blocking forms of the batch-operation methods of :class:`AsyncClient`."""

    _async: AsyncClient

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        raise NotImplementedError

    def preview_batch_operation(
        self,
        op_kind: BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: BatchOperationFilter | None = None,
    ) -> BatchOperationPreview:
        """Preview a batch operation without submitting it."""
        return self._run(self._async.preview_batch_operation(op_kind, spec=spec, filter=filter))

    def submit_batch_operation(
        self,
        op_kind: BatchOperationKind,
        *,
        spec: dict[str, Any],
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Submit a batch operation for the maintenance leader to run."""
        return self._run(
            self._async.submit_batch_operation(
                op_kind, spec=spec, filter=filter, submitted_by=submitted_by, allow_all=allow_all
            )
        )

    def preview_set_priority(
        self, priority: int, *, filter: BatchOperationFilter | None = None
    ) -> BatchOperationPreview:
        """Preview :meth:`set_priority`."""
        return self._run(self._async.preview_set_priority(priority, filter=filter))

    def set_priority(
        self,
        priority: int,
        *,
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Submit an operation changing queued jobs' priority."""
        return self._run(
            self._async.set_priority(
                priority, filter=filter, submitted_by=submitted_by, allow_all=allow_all
            )
        )

    def preview_move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: BatchOperationFilter | None = None,
    ) -> BatchOperationPreview:
        """Preview :meth:`move_queue`."""
        return self._run(self._async.preview_move_queue(queue, priority=priority, filter=filter))

    def move_queue(
        self,
        queue: str,
        *,
        priority: int | None = None,
        filter: BatchOperationFilter | None = None,
        submitted_by: str | None = None,
        allow_all: bool = False,
    ) -> BatchOperation:
        """Submit an operation moving queued jobs to another queue."""
        return self._run(
            self._async.move_queue(
                queue,
                priority=priority,
                filter=filter,
                submitted_by=submitted_by,
                allow_all=allow_all,
            )
        )

    def list_batch_operations(
        self, *, state: BatchOperationState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        """Operations, newest first."""
        return self._run(self._async.list_batch_operations(state=state, limit=limit))

    def get_batch_operation(self, operation_id: str) -> BatchOperation:
        """One operation by UUID."""
        return self._run(self._async.get_batch_operation(operation_id))

    def cancel_batch_operation(self, operation_id: str) -> BatchOperation:
        """Ask an unfinished operation to stop at its next chunk boundary."""
        return self._run(self._async.cancel_batch_operation(operation_id))

    def purge_batch_operations(self, before: datetime, *, limit: int = 1000) -> int:
        """Delete finished operations finalized before ``before``."""
        return self._run(self._async.purge_batch_operations(before, limit=limit))
