"""Async client operations for operators: DLQ, external callbacks and job dumps."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from awa.domain.callbacks import (
    CallbackExpressions,
    check_default_action,
    decide_resolution,
    validate_timeout,
)
from awa.domain.errors import ValidationError
from awa.domain.held_back import HeldBack
from awa.domain.job import DlqEntry as DlqRecord
from awa.domain.job import JobRecord
from awa.domain.states import TERMINAL_STATES, JobState
from awa.domain.validation import validate_job_id
from awa.entrypoints import cel, payloads
from awa.entrypoints.args import parse_run_at
from awa.entrypoints.client_core import ClientCore, not_found
from awa.entrypoints.job import Job, rfc3339
from awa.entrypoints.results import DlqEntry, ResolveResult
from awa.ports.storage import DlqFilter, JobFilter
from awa.runtime import metrics


def _dlq_entry(entry: DlqRecord) -> DlqEntry:
    return DlqEntry(Job(entry.job), entry.reason, entry.dlq_at, entry.original_run_lease)


def _count_dlq(
    name: str,
    amount: int,
    *,
    queue: str | None,
    kind: str | None,
    reason: str | None = None,
) -> None:
    """Count a DLQ operation (labelled with the queue / kind it names, when it does)."""
    instruments = metrics.instruments()
    if instruments is not None:
        instruments.dlq(name, amount, queue=queue, kind=kind, reason=reason)


def _callback_id(callback_id: str) -> str:
    try:
        return str(uuid.UUID(callback_id))
    except (ValueError, TypeError, AttributeError):
        raise ValidationError("callback_id", f"not a valid UUID: {callback_id!r}") from None


def _guard(operation: str, fields: str, filter_empty: bool, allow_all: bool) -> None:
    if filter_empty and not allow_all:
        raise ValidationError(
            "filter", f"{operation} requires at least one of {fields} (or allow_all=true)"
        )


def job_dict(record: JobRecord) -> dict[str, Any]:
    """Every column of a job, JSON-ready."""
    return {
        "id": record.id,
        "kind": record.kind,
        "queue": record.queue,
        "args": record.args,
        "state": str(record.state),
        "priority": record.priority,
        "attempt": record.attempt,
        "run_lease": record.run_lease,
        "max_attempts": record.max_attempts,
        "run_at": rfc3339(record.run_at),
        "heartbeat_at": rfc3339(record.heartbeat_at),
        "deadline_at": rfc3339(record.deadline_at),
        "attempted_at": rfc3339(record.attempted_at),
        "finalized_at": rfc3339(record.finalized_at),
        "created_at": rfc3339(record.created_at),
        "errors": list(record.errors),
        "metadata": record.metadata,
        "tags": list(record.tags),
        "unique_key": None if record.unique_key is None else record.unique_key.hex(),
        "unique_states": record.unique_states,
        "callback_id": record.callback_id,
        "callback_timeout_at": rfc3339(record.callback_timeout_at),
        "progress": record.progress,
    }


def held_back_json(held_back: HeldBack | None) -> dict[str, Any] | None:
    """A job's ``held_back`` key beside its columns (ADR 0029): why a limit holds it
    back now, or ``None``."""
    return None if held_back is None else held_back.as_json()


def _timeline(record: JobRecord) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"timestamp": rfc3339(record.created_at), "label": "Created", "state": None}
    ]
    for entry in record.errors:
        events.append(
            {
                "timestamp": entry.get("at"),
                "label": f"Attempt {entry.get('attempt')} failed",
                "state": None,
                "detail": entry.get("error"),
                "is_error": True,
            }
        )
    if record.attempted_at is not None:
        events.append({"timestamp": rfc3339(record.attempted_at), "label": "Last attempt started"})
    if record.finalized_at is not None:
        events.append(
            {
                "timestamp": rfc3339(record.finalized_at),
                "label": f"Finalized ({record.state})",
                "state": str(record.state),
            }
        )
    return events


def job_document(record: JobRecord | None, dlq: DlqRecord | None) -> dict[str, Any]:
    """A job's row, summary, timeline and (when dead-lettered) DLQ block; one of
    ``record`` / ``dlq`` must be given."""
    source = record if record is not None else dlq.job  # type: ignore[union-attr]
    doc: dict[str, Any] = {
        "job": job_dict(source),
        "summary": {
            "original_priority": source.metadata.get("_awa_original_priority", source.priority),
            "can_retry": source.state in TERMINAL_STATES or dlq is not None,
            "can_cancel": source.state not in TERMINAL_STATES and dlq is None,
            "error_count": len(source.errors),
            "latest_error": source.errors[-1].get("error") if source.errors else None,
        },
        "timeline": _timeline(source),
    }
    if dlq is not None:
        doc["dlq"] = {
            "reason": dlq.reason,
            "dlq_at": rfc3339(dlq.dlq_at),
            "original_run_lease": dlq.original_run_lease,
        }
    return doc


class AdminMixin(ClientCore):
    """DLQ, external-callback and inspection methods of the async client."""

    # ------------------------------------------------------------------ inspection
    async def dump_job(self, job_id: int) -> str:
        """Everything known about a job (row, summary, timeline, DLQ entry) as JSON."""
        validate_job_id(job_id)
        engine = await self._engine()
        record = await engine.get_job(job_id)
        dlq = await engine.get_dlq(job_id) if record is None else None
        if record is None and dlq is None:
            raise not_found(job_id)
        return payloads.dumps(job_document(record, dlq), indent=2)

    async def dump_run(self, job_id: int, attempt: int | None = None) -> str:
        """One attempt of a job (the current one by default) as JSON."""
        record = await (await self._engine()).get_job(validate_job_id(job_id))
        if record is None:
            raise not_found(job_id)
        selected = record.attempt if attempt is None else attempt
        if not 0 <= selected <= record.attempt:
            raise ValidationError(
                "attempt", f"job {job_id} has attempts 0..{record.attempt}, got {selected}"
            )
        error = next((e for e in record.errors if e.get("attempt") == selected), None)
        current = selected == record.attempt
        notes: list[str] = []
        if selected == 0:
            notes.append("Job has not been claimed yet; attempt 0 is the pre-run snapshot.")
        doc = {
            "job_id": record.id,
            "kind": record.kind,
            "queue": record.queue,
            "selected_attempt": selected,
            "current_attempt": record.attempt,
            "current_run_lease": record.run_lease,
            "source": "current_job_row" if current else "error_history",
            "state": str(record.state) if current else None,
            "started_at": rfc3339(record.attempted_at) if current else None,
            "finished_at": rfc3339(record.finalized_at) if current else error and error["at"],
            "error": None if error is None else error.get("error"),
            "terminal": None if error is None else bool(error.get("terminal", False)),
            "progress": record.progress if current else None,
            "metadata": record.metadata,
            "callback": (
                None
                if record.callback_id is None
                else {
                    "id": record.callback_id,
                    "timeout_at": rfc3339(record.callback_timeout_at),
                }
            ),
            "raw_error_entry": error,
            "notes": notes,
        }
        return payloads.dumps(doc, indent=2)

    # ------------------------------------------------------------------ DLQ
    async def list_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        limit: int = 100,
    ) -> list[DlqEntry]:
        """DLQ entries, newest first; ``before_*`` continue from the previous page."""
        dlq_filter = DlqFilter(
            kind=kind, queue=queue, tag=tag, before_id=before_id, before_dlq_at=before_dlq_at
        )
        entries = await (await self._engine()).list_dlq(dlq_filter, limit=limit)
        return [_dlq_entry(e) for e in entries]

    async def get_dlq_job(self, job_id: int) -> DlqEntry | None:
        """The DLQ entry of a job, or ``None``."""
        entry = await (await self._engine()).get_dlq(validate_job_id(job_id))
        return None if entry is None else _dlq_entry(entry)

    async def dlq_depth(self, *, queue: str | None = None) -> int:
        """How many jobs the DLQ holds (for one queue, or in total)."""
        return await (await self._engine()).dlq_depth(queue)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        """DLQ depth per queue."""
        return await (await self._engine()).dlq_depth_by_queue()

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job[Any] | None:
        """Re-enqueue a DLQ'd job with a fresh attempt budget; ``None`` if not in the DLQ."""
        validate_job_id(job_id)
        record = await (await self._engine()).retry_from_dlq(
            job_id, run_at=parse_run_at(run_at), priority=priority, queue=queue
        )
        if record is None:
            return None
        _count_dlq("awa.job.dlq_retried", 1, queue=record.queue, kind=record.kind)
        return Job(record)

    async def bulk_retry_from_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        allow_all: bool = False,
    ) -> int:
        """Re-enqueue every matching DLQ entry; an empty filter needs ``allow_all``."""
        dlq_filter = DlqFilter(kind=kind, queue=queue, tag=tag)
        _guard("bulk_retry_from_dlq", "kind, queue, or tag", dlq_filter.is_empty, allow_all)
        count = await (await self._engine()).bulk_retry_from_dlq(dlq_filter)
        _count_dlq("awa.job.dlq_retried", count, queue=queue, kind=kind)
        return count

    async def move_failed_to_dlq(self, job_id: int, reason: str) -> DlqEntry | None:
        """Move one failed job into the DLQ; ``None`` if it is not a failed job."""
        validate_job_id(job_id)
        entry = await (await self._engine()).move_failed_to_dlq(job_id, reason=reason)
        if entry is None:
            return None
        job = entry.job
        _count_dlq("awa.job.dlq_moved", 1, queue=job.queue, kind=job.kind, reason=entry.reason)
        return _dlq_entry(entry)

    async def bulk_move_failed_to_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        reason: str = "manual",
        allow_all: bool = False,
    ) -> int:
        """Move every matching failed job into the DLQ; an empty filter needs ``allow_all``."""
        empty = kind is None and queue is None
        _guard("bulk_move_failed_to_dlq", "kind or queue", empty, allow_all)
        count = await (await self._engine()).bulk_move_failed_to_dlq(
            JobFilter(kind=kind, queue=queue), reason=reason
        )
        _count_dlq("awa.job.dlq_moved", count, queue=queue, kind=kind, reason=reason)
        return count

    async def purge_dlq_job(self, job_id: int) -> bool:
        """Delete one DLQ entry; returns whether it existed."""
        validate_job_id(job_id)
        engine = await self._engine()
        # The entry's queue and kind label the counter; read only when metrics record.
        entry = await engine.get_dlq(job_id) if metrics.instruments() is not None else None
        removed = await engine.purge_dlq_job(job_id)
        if removed:
            job = entry.job if entry is not None else None
            _count_dlq(
                "awa.job.dlq_purged",
                1,
                queue=None if job is None else job.queue,
                kind=None if job is None else job.kind,
            )
        return removed

    async def purge_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        before_id: int | None = None,
        before_dlq_at: datetime | None = None,
        allow_all: bool = False,
    ) -> int:
        """Delete matching DLQ entries; an empty filter needs ``allow_all``."""
        dlq_filter = DlqFilter(
            kind=kind, queue=queue, tag=tag, before_id=before_id, before_dlq_at=before_dlq_at
        )
        _guard("purge_dlq", "kind, queue, or tag", dlq_filter.is_empty, allow_all)
        count = await (await self._engine()).purge_dlq(dlq_filter)
        _count_dlq("awa.job.dlq_purged", count, queue=queue, kind=kind)
        return count

    # ------------------------------------------------------------------ callbacks
    async def _resolve(
        self,
        callback_id: str,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> Job[Any]:
        engine = await self._engine()
        record = await engine.resolve_callback(
            _callback_id(callback_id),
            action=action,
            payload=payload,
            error=error,
            expression=expression,
        )
        if action == "fail" and record.state is JobState.Failed:
            # The engine moved the job into the DLQ if its queue has it enabled; the
            # entry names the reason. Read only when metrics record.
            entry = await engine.get_dlq(record.id) if metrics.instruments() is not None else None
            if entry is not None and entry.original_run_lease == record.run_lease:
                _count_dlq(
                    "awa.job.dlq_moved",
                    1,
                    queue=record.queue,
                    kind=record.kind,
                    reason=entry.reason,
                )
        return Job(record)

    async def complete_external(
        self, callback_id: str, payload: dict[str, Any] | None = None
    ) -> Job[Any]:
        """Complete the job waiting on ``callback_id``."""
        return await self._resolve(callback_id, "complete", payload)

    async def fail_external(self, callback_id: str, error: str) -> Job[Any]:
        """Fail the job waiting on ``callback_id`` with ``error``."""
        return await self._resolve(callback_id, "fail", error=error)

    async def retry_external(self, callback_id: str) -> Job[Any]:
        """Make the job waiting on ``callback_id`` retryable."""
        return await self._resolve(callback_id, "retry")

    async def resume_external(
        self, callback_id: str, payload: dict[str, Any] | None = None
    ) -> Job[Any]:
        """Resume a handler waiting in ``wait_for_callback`` with ``payload``."""
        return await self._resolve(callback_id, "resume", payload)

    async def heartbeat_callback(
        self, callback_id: str, timeout_seconds: float = 3600.0
    ) -> Job[Any]:
        """Push the callback's timeout to ``now + timeout_seconds`` (a finite number, not
        negative; ``ValidationError`` otherwise)."""
        timeout_seconds = validate_timeout(timeout_seconds, "heartbeat_callback")
        record = await (await self._engine()).heartbeat_callback(
            _callback_id(callback_id), timeout=timedelta(seconds=timeout_seconds)
        )
        return Job(record)

    async def resolve_callback(
        self,
        callback_id: str,
        payload: dict[str, Any] | None = None,
        default_action: str = "ignore",
    ) -> ResolveResult:
        """Resolve a callback by the CEL expressions it was registered with: a ``filter``
        that is not true ignores the payload; ``on_fail`` fails the job, ``on_complete``
        completes it (with ``transform``'s result as the payload); otherwise
        ``default_action`` (``complete``, ``fail`` or ``ignore``: leave it waiting)."""
        check_default_action(default_action)
        cid = _callback_id(callback_id)
        engine = await self._engine()
        expressions = await engine.callback_expressions(cid) or CallbackExpressions()

        def transformed(expression: str) -> Any:
            try:
                return cel.evaluate(expression, payload)
            except cel.EvaluationFailed:
                # awa-pg keeps the payload as sent when the transform cannot run.
                return payload

        decision = decide_resolution(
            expressions,
            payload,
            matched=lambda expression: cel.matches(expression, payload),
            transformed=transformed,
            default_action=default_action,
        )
        if decision.outcome == "complete":
            job = await self._resolve(cid, "complete", decision.payload)
            return ResolveResult("completed", job, decision.payload)
        if decision.outcome == "fail":
            job = await self._resolve(
                cid, "fail", error=decision.error, expression=decision.expression
            )
            return ResolveResult("failed", job, None)
        return ResolveResult("ignored", None, None, decision.reason)
