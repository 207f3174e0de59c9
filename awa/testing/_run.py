"""Run jobs inside a test the way a worker would: the real executor, a real ``Job``.

:func:`work_next` claims the next available job of a queue and runs the handler the
application registered on its client for that job's kind (``async def`` or plain
``def``), with the same ``Job`` a worker hands it (progress, metadata, callbacks), then
records the outcome through the same code path a worker uses. :func:`drain` repeats that
until the queue has nothing available.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio

from awa.adapters.clock import SystemClock
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.entrypoints.client_async import AsyncClient, _job_factory
from awa.ports.relations import JobRelations
from awa.ports.results import ResultStore
from awa.runtime.completion import CompletionBatcher
from awa.runtime.context import AttemptContext
from awa.runtime.executor import Executor
from awa.runtime.handlers import HandlerRegistry

#: How long a job claimed by a test helper may run before its deadline passes.
DEFAULT_DEADLINE = timedelta(minutes=5)


@dataclasses.dataclass
class JobRow:
    """A job's identifying columns and its state after it was worked."""

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

_OUTCOMES = {
    JobState.Completed: "completed",
    JobState.Failed: "failed",
    JobState.Cancelled: "cancelled",
    JobState.Retryable: "retryable",
    JobState.Scheduled: "snoozed",
    JobState.Available: "snoozed",
    JobState.WaitingExternal: "waiting_external",
    JobState.Running: "running",
}


@dataclasses.dataclass
class WorkResult:
    """What happened to a job a helper ran.

    ``outcome`` is ``completed``, ``retryable``, ``failed``, ``cancelled``, ``snoozed``,
    ``waiting_external`` or ``no_job``; ``error`` is the recorded error, if any."""

    job: JobRow | _NoJob
    outcome: str
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

    def is_waiting_external(self) -> bool:
        return self.outcome == "waiting_external"

    def is_no_job(self) -> bool:
        return self.outcome == "no_job"


def _handlers(client: AsyncClient) -> HandlerRegistry:
    return client._handlers


async def work_next(
    client: AsyncClient,
    queue: str = "default",
    *,
    kind: str | None = None,
    handlers: HandlerRegistry | None = None,
) -> WorkResult:
    """Claim the next available job of ``queue`` and run the handler ``client`` has
    registered for its kind, as a worker would; returns what happened.

    With ``kind``, a claimed job of another kind is handed back untouched (available
    again, attempt not counted) and the result is ``no_job``. A job whose kind has no
    registered handler fails, exactly as on a worker."""
    registry = handlers if handlers is not None else _handlers(client)
    engine = await client._engine()
    claims = await engine.claim(queue, limit=1, deadline=DEFAULT_DEADLINE)
    if not claims:
        return WorkResult(job=NoJob, outcome="no_job")
    claim = claims[0]
    if kind is not None and claim.job.kind != kind:
        await engine.release(claim.lease, error="claimed by a test helper for another kind")
        # Released jobs are due now; promote them as the leader would, so it is available.
        await engine.promote_due()
        return WorkResult(job=NoJob, outcome="no_job")
    context = AttemptContext(engine, claim, queue=queue, clock=SystemClock())
    control = await client._control()
    await _execute(engine, registry, context, control.results, control.relations)
    record = (await client.get_job(claim.job.id)).record
    error = str(record.errors[-1].get("error")) if record.errors else None
    if record.state is JobState.Completed:
        error = None
    return WorkResult(job=JobRow.from_record(record), outcome=_OUTCOMES[record.state], error=error)


async def _execute(
    engine: Any,
    registry: HandlerRegistry,
    context: AttemptContext,
    results: ResultStore,
    relations: JobRelations,
) -> None:
    finished = anyio.Event()

    def on_finished(ctx: AttemptContext) -> None:
        finished.set()

    batcher = CompletionBatcher(engine, clock=context.clock, batch_size=1)
    executor = Executor(
        engine,
        registry,
        batcher,
        clock=context.clock,
        thread_limiter=anyio.CapacityLimiter(1),
        on_finished=on_finished,
        results=results,
        relations=relations,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        await executor.execute(context)
        await finished.wait()
        tg.cancel_scope.cancel()


async def drain(
    client: AsyncClient,
    queue: str = "default",
    *,
    max_jobs: int = 10_000,
) -> list[WorkResult]:
    """Work jobs of ``queue`` until none is available; returns one result per job run.

    Jobs that become due later (a retry's backoff, a snooze, ``run_at``) are not waited
    for. Raises ``AssertionError`` after ``max_jobs`` jobs, which catches a handler that
    keeps enqueueing into the queue it drains."""
    results: list[WorkResult] = []
    while True:
        result = await work_next(client, queue)
        if result.is_no_job():
            return results
        results.append(result)
        if len(results) >= max_jobs:
            raise AssertionError(f"queue {queue!r} still had jobs after {max_jobs} were worked")


def registry_for(
    args_type: type[Any], handler: Callable[..., Any], *, kind: str, queue: str
) -> HandlerRegistry:
    """A registry holding only ``handler`` for ``kind`` (``AwaTestClient.work_one``)."""
    registry = HandlerRegistry()
    registry.register(kind, handler, queue=queue, job_factory=_job_factory(args_type))
    return registry
