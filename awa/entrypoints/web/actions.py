"""Operator mutations shared by the REST API and the pages.

Each one first asks the write guard (503 in read-only mode), then acts through the
client, then drops the read cache so the next poll shows the change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from awa.domain.batch_ops import BatchOpKind
from awa.domain.errors import ValidationError
from awa.domain.lifecycle import operator_retry_applies
from awa.domain.states import TERMINAL_STATES
from awa.entrypoints.web.errors import ApiError, bad_request, not_found
from awa.entrypoints.web.reads import job_json
from awa.entrypoints.web.state import WebState


async def retry_job(web: WebState, job_id: int) -> dict[str, Any] | None:
    """Make a finished or waiting job available now; ``None`` if it is already runnable."""
    await web.guard.require_writable()
    engine = await web.client.admin_engine()
    before = await engine.get_job(job_id)
    if before is None:
        raise not_found(f"job not found: {job_id}")
    if not operator_retry_applies(before.state):
        return None  # available or running: already on its way
    record = await engine.retry_job(job_id)
    await web.mutated()
    return None if record is None else job_json(record)


async def cancel_job(web: WebState, job_id: int) -> dict[str, Any] | None:
    """Cancel a job that has not finished; ``None`` if it already has."""
    await web.guard.require_writable()
    engine = await web.client.admin_engine()
    before = await engine.get_job(job_id)
    if before is None:
        raise not_found(f"job not found: {job_id}")
    if before.state in TERMINAL_STATES:
        return None
    record = await engine.cancel_job(job_id)
    await web.mutated()
    return None if record is None else job_json(record)


async def bulk(web: WebState, action: str, ids: list[int]) -> list[dict[str, Any]]:
    """Retry or cancel each id; returns the jobs that changed (unknown ids are skipped)."""
    await web.guard.require_writable()
    one = retry_job if action == "retry" else cancel_job
    changed = []
    for job_id in ids:
        try:
            row = await one(web, job_id)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                continue
            raise
        if row is not None:
            changed.append(row)
    return changed


async def pause_queue(web: WebState, queue: str, paused_by: str | None) -> dict[str, Any]:
    await web.guard.require_writable()
    await web.client.pause_queue(queue, paused_by=paused_by or "ui")
    await web.mutated()
    return {"ok": True}


async def resume_queue(web: WebState, queue: str) -> dict[str, Any]:
    await web.guard.require_writable()
    await web.client.resume_queue(queue)
    await web.mutated()
    return {"ok": True}


async def drain_queue(web: WebState, queue: str) -> dict[str, Any]:
    await web.guard.require_writable()
    drained = await web.client.drain_queue(queue)
    await web.mutated()
    return {"drained": drained}


# ---------------------------------------------------------------------- DLQ
async def retry_dlq(
    web: WebState,
    job_id: int,
    *,
    run_at: datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> dict[str, Any] | None:
    await web.guard.require_writable()
    job = await web.client.retry_from_dlq(job_id, run_at=run_at, priority=priority, queue=queue)
    await web.mutated()
    return None if job is None else job_json(job.record)


async def purge_dlq_job(web: WebState, job_id: int) -> dict[str, Any]:
    await web.guard.require_writable()
    removed = await web.client.purge_dlq_job(job_id)
    await web.mutated()
    return {"count": 1 if removed else 0}


async def dlq_bulk(web: WebState, action: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``retry``, ``purge`` or ``move`` every matching entry (``all`` for no filter)."""
    await web.guard.require_writable()
    kind, queue, tag = doc.get("kind"), doc.get("queue"), doc.get("tag")
    allow_all = bool(doc.get("all", False))
    if action == "retry":
        count = await web.client.bulk_retry_from_dlq(
            kind=kind, queue=queue, tag=tag, allow_all=allow_all
        )
    elif action == "purge":
        count = await web.client.purge_dlq(kind=kind, queue=queue, tag=tag, allow_all=allow_all)
    else:
        if tag is not None:
            raise bad_request("bulk-move filters by kind and queue only (tag is not supported)")
        count = await web.client.bulk_move_failed_to_dlq(
            kind=kind, queue=queue, reason=doc.get("reason") or "manual", allow_all=allow_all
        )
    await web.mutated()
    return {"count": count}


# ---------------------------------------------------------------------- cron
async def cron_action(
    web: WebState, name: str, action: str, paused_by: str | None = None
) -> dict[str, Any]:
    """Trigger (returns the new job), pause or resume (``{"ok": true}``) a schedule;
    404 when there is no schedule of that name."""
    await web.guard.require_writable()
    client = web.client
    if action == "trigger":
        try:
            job = await client.trigger_cron_job(name)
        except ValidationError:
            # The only refusal trigger_cron_job has: no stored schedule of that name.
            raise not_found(f"cron schedule not found: {name}") from None
        await web.mutated()
        return job_json(job.record)
    if action == "pause":
        found = await client.pause_cron_job(name, paused_by=paused_by)
    elif action == "resume":
        found = await client.resume_cron_job(name)
    else:
        raise not_found(f"unknown cron action {action!r}")
    await web.mutated()
    if not found:
        raise not_found(f"cron schedule not found: {name}")
    return {"ok": True}


# ---------------------------------------------------------------------- batch operations
async def batch_preview(web: WebState, doc: dict[str, Any]) -> dict[str, Any]:
    await web.guard.require_writable()
    op_kind, spec, op_filter = _batch_fields(doc)
    preview = await web.client.preview_batch_operation(
        op_kind,  # type: ignore[arg-type]
        spec=spec,
        filter=op_filter,  # type: ignore[arg-type]
    )
    return dict(preview)


async def batch_submit(web: WebState, doc: dict[str, Any]) -> dict[str, Any]:
    await web.guard.require_writable()
    op_kind, spec, op_filter = _batch_fields(doc)
    submitted_by = doc.get("submitted_by") or "ui"
    allow_all = doc.get("all", False)
    if not isinstance(allow_all, bool):
        raise bad_request("all must be true or false")
    op = await web.client.submit_batch_operation(
        op_kind,  # type: ignore[arg-type]
        spec=spec,
        filter=op_filter,  # type: ignore[arg-type]
        submitted_by=submitted_by,
        allow_all=allow_all,
    )
    await web.mutated()
    return dict(op)


async def batch_cancel(web: WebState, operation_id: str) -> dict[str, Any]:
    """Ask an operation to stop: 404 for an unknown id, 409 once it has finished."""
    await web.guard.require_writable()
    await web.reads.batch_operation(operation_id)
    try:
        op = await web.client.cancel_batch_operation(operation_id)
    except ValidationError:
        raise ApiError(
            409, f"batch operation {operation_id} has already finished; nothing to cancel"
        ) from None
    await web.mutated()
    return dict(op)


def _batch_fields(doc: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    op_kind = doc.get("op_kind")
    kinds = [str(k) for k in BatchOpKind]
    if op_kind not in kinds:
        raise bad_request(f"op_kind must be one of {', '.join(kinds)}")
    spec = doc.get("spec") or {}
    op_filter = doc.get("filter")
    if not isinstance(spec, dict):
        raise bad_request("spec must be a JSON object")
    if op_filter is not None and not isinstance(op_filter, dict):
        raise bad_request("filter must be a JSON object")
    return op_kind, spec, op_filter or None
