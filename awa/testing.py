"""Helpers for testing job handlers against a real database.

``AwaTestClient(client)`` wraps an :class:`awa.AsyncClient`: ``migrate``, ``clean``,
``insert`` and ``work_one`` (claim one job of a kind, run a handler on it, record the
outcome). The ``awa_client`` pytest fixture yields a migrated, cleaned test client; it is
an async fixture for ``anyio`` (``@pytest.mark.anyio``) tests.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

import pytest

from awa.domain.errors import TerminalError
from awa.domain.handler_results import Cancel, RetryAfter, Snooze
from awa.domain.job import JobRecord
from awa.entrypoints.args import kind_for_type, rebuild_args
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.job import Job

T = TypeVar("T")

DEFAULT_DATABASE_URL = "postgres://postgres:test@localhost:5432/awa_test"


def get_database_url() -> str:
    """``DATABASE_URL`` from the environment, or the conventional local test database."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)


@dataclasses.dataclass
class JobRow:
    """A job's identifying columns and its state after ``work_one``."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    tags: list[str]
    state: str | None = None

    @classmethod
    def from_record(cls, record: JobRecord) -> JobRow:
        return cls(
            id=record.id,
            kind=record.kind,
            queue=record.queue,
            args=record.args,
            attempt=record.attempt,
            max_attempts=record.max_attempts,
            priority=record.priority,
            tags=list(record.tags),
            state=str(record.state),
        )


class _NoJob:
    """Sentinel: there was no job to work."""

    _instance: _NoJob | None = None

    def __new__(cls) -> _NoJob:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NoJob"

    def __bool__(self) -> bool:
        return False


NoJob = _NoJob()
"""Singleton used as ``WorkResult.job`` when no job was found."""


@dataclasses.dataclass
class HandlerJob(Generic[T]):
    """The job handed to a handler by ``work_one``."""

    args: T
    id: int
    attempt: int
    max_attempts: int
    queue: str
    priority: int
    deadline: datetime | None
    metadata: dict[str, Any]
    tags: list[str]

    def is_cancelled(self) -> bool:
        return False


@dataclasses.dataclass
class WorkResult:
    """What happened to the job ``work_one`` ran."""

    job: JobRow | _NoJob
    outcome: str  # completed, retryable, failed, cancelled, snoozed, no_job
    error: str | None = None

    def is_completed(self) -> bool:
        return self.outcome == "completed"

    def is_failed(self) -> bool:
        return self.outcome == "failed"

    def is_retryable(self) -> bool:
        return self.outcome == "retryable"

    def is_cancelled(self) -> bool:
        return self.outcome == "cancelled"

    def is_snoozed(self) -> bool:
        return self.outcome == "snoozed"

    def is_no_job(self) -> bool:
        return self.outcome == "no_job"


class AwaTestClient:
    """A test helper around an :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def insert(self, args: Any, **kwargs: Any) -> Job[Any]:
        """Insert a job (``AsyncClient.insert``)."""
        return await self._client.insert(args, **kwargs)

    async def migrate(self) -> None:
        """Apply schema migrations."""
        await self._client.migrate()

    async def clean(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting."""
        await self._client.install_queue_storage(reset=True)

    async def work_one(
        self,
        args_type: type[Any],
        handler: Callable[[HandlerJob[Any]], Awaitable[Any]],
        *,
        kind: str | None = None,
        queue: str = "default",
    ) -> WorkResult:
        """Claim one job of ``args_type``'s kind from ``queue``, run ``handler`` on it and
        apply the outcome. ``outcome="no_job"`` when nothing of that kind is available."""
        resolved = kind_for_type(args_type, kind)
        engine = await self._client._engine()
        claims = await engine.claim(queue, limit=1, deadline=None)
        if not claims:
            return WorkResult(job=NoJob, outcome="no_job")
        claim = claims[0]
        record, lease = claim.job, claim.lease
        if record.kind != resolved:
            # Claims are per queue: hand a job of another kind straight back, ready again.
            await engine.release(lease, error="claimed by a test helper for another kind")
            await engine.retry_job(record.id)
            return WorkResult(job=NoJob, outcome="no_job")
        try:
            args = rebuild_args(args_type, record.args)
        except Exception as exc:
            await engine.fail(lease, error=f"failed to deserialize args: {exc}")
            return await self._result(record.id, "failed", str(exc))
        job = HandlerJob(
            args=args,
            id=record.id,
            attempt=record.attempt,
            max_attempts=record.max_attempts,
            queue=record.queue,
            priority=record.priority,
            deadline=claim.deadline_at,
            metadata=dict(record.metadata),
            tags=list(record.tags),
        )
        try:
            result = await handler(job)
        except TerminalError as exc:
            await engine.fail(lease, error=str(exc))
            return await self._result(record.id, "failed", str(exc))
        except Exception as exc:
            await engine.retry(lease, error=f"{type(exc).__name__}: {exc}")
            state = (await self._row(record.id)).state
            return await self._result(
                record.id, "failed" if state == "failed" else "retryable", str(exc)
            )
        if isinstance(result, RetryAfter):
            await engine.retry(
                lease, error="retry requested by handler", delay=timedelta(seconds=result.seconds)
            )
            return await self._result(record.id, "retryable")
        if isinstance(result, Snooze):
            await engine.snooze(lease, delay=timedelta(seconds=result.seconds))
            return await self._result(record.id, "snoozed")
        if isinstance(result, Cancel):
            await engine.cancel_attempt(lease, reason=result.reason)
            return await self._result(record.id, "cancelled", result.reason)
        await engine.complete([lease])
        return await self._result(record.id, "completed")

    async def _row(self, job_id: int) -> JobRow:
        return JobRow.from_record((await self._client.get_job(job_id)).record)

    async def _result(self, job_id: int, outcome: str, error: str | None = None) -> WorkResult:
        return WorkResult(job=await self._row(job_id), outcome=outcome, error=error)


@pytest.fixture
async def awa_client() -> AsyncIterator[AwaTestClient]:
    """A migrated, cleaned :class:`AwaTestClient` on :func:`get_database_url`."""
    client = AsyncClient(get_database_url())
    try:
        helper = AwaTestClient(client)
        await helper.migrate()
        await helper.clean()
        yield helper
    finally:
        await client.close()
