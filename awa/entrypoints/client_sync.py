"""``Client``: the blocking client, with the same method names as ``AsyncClient``.

Each client owns one event loop running in a background daemon thread; every call is
submitted to it and waited for, so the client works from any thread (including one that
is itself running an event loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from awa.domain.errors import DatabaseError
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.client_sync_batch import SyncBatchOpsMixin
from awa.entrypoints.job import Job
from awa.entrypoints.results import (
    DlqEntry,
    HealthCheck,
    QueueStat,
    ResolveResult,
    RetryFailedResult,
)
from awa.entrypoints.transaction import SyncTransaction

R = TypeVar("R")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="awa-client-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise DatabaseError("attempted to acquire a connection on a closed pool")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Client(SyncBatchOpsMixin):
    """Blocking client for producers and operators (``with Client(url) as client``).

    Construction checks the database is reachable. Worker methods (``task``, ``start``,
    ``shutdown``) live on :class:`AsyncClient` only.
    """

    def __init__(self, database_url: str, max_connections: int = 10) -> None:
        self._async = AsyncClient(database_url, max_connections)
        self._loop = _LoopThread()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coro)

    def close(self) -> None:
        """Close every connection; later calls raise ``DatabaseError``. Idempotent."""
        try:
            if not self._loop.loop.is_closed():
                self._run(self._async.close())
        finally:
            self._loop.stop()

    # ------------------------------------------------------------------ enqueue
    def insert(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str = "default",
        priority: int = 2,
        max_attempts: int = 25,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        run_at: Any | None = None,
        unique_opts: dict[str, Any] | None = None,
        ordering_key: bytes | str | None = None,
        queue_storage_queue_stripe_count: int = 1,
    ) -> Job[Any]:
        """Insert one job (see ``AsyncClient.insert``)."""
        return self._run(
            self._async.insert(
                args,
                kind=kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                tags=tags,
                metadata=metadata,
                run_at=run_at,
                unique_opts=unique_opts,
                ordering_key=ordering_key,
                queue_storage_queue_stripe_count=queue_storage_queue_stripe_count,
            )
        )

    def insert_many_copy(
        self,
        jobs: list[Any],
        *,
        kind: str | None = None,
        queue: str = "default",
        priority: int = 2,
        max_attempts: int = 25,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        run_at: Any | None = None,
        unique_opts: dict[str, Any] | None = None,
        ordering_key: bytes | str | None = None,
        opts: list[dict[str, Any] | None] | None = None,
        queue_storage_queue_stripe_count: int = 1,
    ) -> list[Job[Any]]:
        """Bulk insert; duplicates of held unique keys are skipped."""
        return self._run(
            self._async.insert_many_copy(
                jobs,
                kind=kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                tags=tags,
                metadata=metadata,
                run_at=run_at,
                unique_opts=unique_opts,
                ordering_key=ordering_key,
                opts=opts,
                queue_storage_queue_stripe_count=queue_storage_queue_stripe_count,
            )
        )

    def enqueue_many_copy(
        self,
        jobs: list[Any],
        *,
        kind: str | None = None,
        queue: str = "default",
        priority: int = 2,
        max_attempts: int = 25,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        run_at: Any | None = None,
        unique_opts: dict[str, Any] | None = None,
        ordering_key: bytes | str | None = None,
        opts: list[dict[str, Any] | None] | None = None,
        queue_storage_queue_stripe_count: int = 1,
    ) -> int:
        """Bulk insert on the fast path; returns how many were inserted."""
        return self._run(
            self._async.enqueue_many_copy(
                jobs,
                kind=kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                tags=tags,
                metadata=metadata,
                run_at=run_at,
                unique_opts=unique_opts,
                ordering_key=ordering_key,
                opts=opts,
                queue_storage_queue_stripe_count=queue_storage_queue_stripe_count,
            )
        )

    def transaction(self) -> SyncTransaction:
        """Begin a transaction (``with client.transaction() as tx``)."""
        return SyncTransaction(self._run(self._async.transaction()), self._run)

    # ------------------------------------------------------------------ schema
    def migrate(self) -> None:
        """Apply pending schema migrations."""
        self._run(self._async.migrate())

    def install_queue_storage(
        self,
        *,
        schema: str = "awa",
        queue_slot_count: int = 16,
        lease_slot_count: int = 8,
        reset: bool = False,
    ) -> None:
        """Make the storage schema ready (``reset=True`` deletes all jobs first)."""
        self._run(
            self._async.install_queue_storage(
                schema=schema,
                queue_slot_count=queue_slot_count,
                lease_slot_count=lease_slot_count,
                reset=reset,
            )
        )

    def storage_status(self) -> str:
        """The storage transition status as JSON."""
        return self._run(self._async.storage_status())

    # ------------------------------------------------------------------ jobs
    def get_job(self, job_id: int) -> Job[Any]:
        """The job with this id; raises ``AwaError`` when missing."""
        return self._run(self._async.get_job(job_id))

    def list_jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Job[Any]]:
        """Matching jobs, newest first."""
        return self._run(self._async.list_jobs(state=state, kind=kind, queue=queue, limit=limit))

    def retry(self, job_id: int) -> Job[Any] | None:
        """Operator retry of one job."""
        return self._run(self._async.retry(job_id))

    def cancel(self, job_id: int) -> Job[Any] | None:
        """Cancel one unfinished job."""
        return self._run(self._async.cancel(job_id))

    def cancel_by_unique_key(
        self,
        kind: str,
        *,
        queue: str | None = None,
        args: Any | None = None,
        period_bucket: int | None = None,
    ) -> Job[Any] | None:
        """Cancel the live job holding the matching unique key."""
        return self._run(
            self._async.cancel_by_unique_key(
                kind, queue=queue, args=args, period_bucket=period_bucket
            )
        )

    def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> RetryFailedResult:
        """Retry every failed job of one kind or queue."""
        return self._run(self._async.retry_failed(kind=kind, queue=queue))

    def discard_failed(self, kind: str) -> int:
        """Delete every failed job of ``kind``."""
        return self._run(self._async.discard_failed(kind))

    def dump_job(self, job_id: int) -> str:
        """Everything known about a job, as JSON."""
        return self._run(self._async.dump_job(job_id))

    def dump_run(self, job_id: int, attempt: int | None = None) -> str:
        """One attempt of a job, as JSON."""
        return self._run(self._async.dump_run(job_id, attempt))

    # ------------------------------------------------------------------ queues
    def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        """Stop claims from ``queue``."""
        self._run(self._async.pause_queue(queue, paused_by))

    def resume_queue(self, queue: str) -> None:
        """Allow claims from ``queue`` again."""
        self._run(self._async.resume_queue(queue))

    def drain_queue(self, queue: str) -> int:
        """Cancel every pending job of ``queue``."""
        return self._run(self._async.drain_queue(queue))

    def queue_stats(self) -> list[QueueStat]:
        """Per-queue counts."""
        return self._run(self._async.queue_stats())

    def flush_admin_metadata(self) -> None:
        """Refresh cached admin metadata."""
        self._run(self._async.flush_admin_metadata())

    def health_check(self) -> HealthCheck:
        """Database health (this client runs no worker)."""
        return self._run(self._async.health_check())

    # ------------------------------------------------------------------ DLQ
    def list_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        limit: int = 100,
    ) -> list[DlqEntry]:
        """DLQ entries, newest first."""
        return self._run(
            self._async.list_dlq(
                kind=kind,
                queue=queue,
                tag=tag,
                before_id=before_id,
                before_dlq_at=before_dlq_at,
                limit=limit,
            )
        )

    def get_dlq_job(self, job_id: int) -> DlqEntry | None:
        """One DLQ entry, or ``None``."""
        return self._run(self._async.get_dlq_job(job_id))

    def dlq_depth(self, *, queue: str | None = None) -> int:
        """DLQ size."""
        return self._run(self._async.dlq_depth(queue=queue))

    def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        """DLQ size per queue."""
        return self._run(self._async.dlq_depth_by_queue())

    def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job[Any] | None:
        """Re-enqueue a DLQ'd job."""
        return self._run(
            self._async.retry_from_dlq(job_id, run_at=run_at, priority=priority, queue=queue)
        )

    def bulk_retry_from_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        allow_all: bool = False,
    ) -> int:
        """Re-enqueue matching DLQ entries."""
        return self._run(
            self._async.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag, allow_all=allow_all)
        )

    def move_failed_to_dlq(self, job_id: int, reason: str) -> DlqEntry | None:
        """Move one failed job into the DLQ."""
        return self._run(self._async.move_failed_to_dlq(job_id, reason))

    def bulk_move_failed_to_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        reason: str = "manual",
        allow_all: bool = False,
    ) -> int:
        """Move matching failed jobs into the DLQ."""
        return self._run(
            self._async.bulk_move_failed_to_dlq(
                kind=kind, queue=queue, reason=reason, allow_all=allow_all
            )
        )

    def purge_dlq_job(self, job_id: int) -> bool:
        """Delete one DLQ entry."""
        return self._run(self._async.purge_dlq_job(job_id))

    def purge_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        allow_all: bool = False,
    ) -> int:
        """Delete matching DLQ entries."""
        return self._run(
            self._async.purge_dlq(
                kind=kind,
                queue=queue,
                tag=tag,
                before_id=before_id,
                before_dlq_at=before_dlq_at,
                allow_all=allow_all,
            )
        )

    # ------------------------------------------------------------------ callbacks
    def complete_external(
        self, callback_id: str, payload: dict[str, Any] | None = None
    ) -> Job[Any]:
        """Complete the job waiting on ``callback_id``."""
        return self._run(self._async.complete_external(callback_id, payload))

    def fail_external(self, callback_id: str, error: str) -> Job[Any]:
        """Fail the job waiting on ``callback_id``."""
        return self._run(self._async.fail_external(callback_id, error))

    def retry_external(self, callback_id: str) -> Job[Any]:
        """Retry the job waiting on ``callback_id``."""
        return self._run(self._async.retry_external(callback_id))

    def resume_external(self, callback_id: str, payload: dict[str, Any] | None = None) -> Job[Any]:
        """Resume the handler waiting on ``callback_id``."""
        return self._run(self._async.resume_external(callback_id, payload))

    def heartbeat_callback(self, callback_id: str, timeout_seconds: float = 3600.0) -> Job[Any]:
        """Extend a callback's timeout."""
        return self._run(self._async.heartbeat_callback(callback_id, timeout_seconds))

    def resolve_callback(
        self,
        callback_id: str,
        payload: dict[str, Any] | None = None,
        default_action: str = "ignore",
    ) -> ResolveResult:
        """Resolve a callback by ``default_action``."""
        return self._run(self._async.resolve_callback(callback_id, payload, default_action))
