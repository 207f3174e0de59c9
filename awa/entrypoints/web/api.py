"""The REST API under ``/api``: JSON in, JSON out, errors as ``{"error": message}``."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awa.entrypoints.job_graph import KEY_LIMIT, key_limit
from awa.entrypoints.web import actions, params
from awa.entrypoints.web.errors import api_error_response, bad_request, not_found
from awa.entrypoints.web.openapi import openapi_document
from awa.entrypoints.web.reads import MAX_TIMESERIES_MINUTES, limit_of
from awa.entrypoints.web.state import WebState, replica_json, web_state
from awa.ports.storage import DlqFilter, JobFilter


def package_version() -> str:
    try:
        return importlib.metadata.version("awa-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


Handler = Callable[[Request, WebState], Awaitable[Any]]

#: The optional admin features this server offers (``/api/capabilities``); every one is
#: served by the client, so each is on. The keys stay so a UI can keep asking.
FEATURES = {"cron": True, "cron_control": True, "batch_operations": True, "descriptors": True}


def _json(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(await handler(request, web_state(request)))
        except Exception as exc:
            return await api_error_response(request, exc)

    endpoint.__name__ = handler.__name__
    return endpoint


# ---------------------------------------------------------------------- meta
async def capabilities(request: Request, web: WebState) -> dict[str, Any]:
    await web.guard.refresh()
    config = web.config
    return {
        "read_only": web.guard.read_only,
        "read_only_reason": web.guard.reason,
        "replica": replica_json(web.guard.replica),
        "poll_interval_ms": config.poll_interval_ms,
        "cache_ttl_ms": int(config.cache_ttl * 1000),
        "instance_name": config.instance_name,
        "instance_color": config.instance_color,
        "peers": [{"name": p.name, "url": p.url} for p in config.peers],
        "features": dict(FEATURES),
        "auth_required": config.auth_token is not None,
        "callbacks_signed": config.callback_secret is not None,
        "version": package_version(),
    }


def _openapi(callback_prefix: str) -> Callable[[Request], Awaitable[Response]]:
    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(callback_prefix))

    return openapi


# ---------------------------------------------------------------------- jobs
async def list_jobs(request: Request, web: WebState) -> Any:
    job_filter = JobFilter(
        kind=params.text(request, "kind"),
        queue=params.text(request, "queue"),
        state=params.state(params.text(request, "state")),
        tag=params.text(request, "tag"),
        before_id=params.integer(request, "before_id"),
    )
    return await web.reads.jobs(
        job_filter, limit=limit_of(params.integer(request, "limit", minimum=1))
    )


async def get_job(request: Request, web: WebState) -> Any:
    job_id = params.path_int(request, "job_id")
    doc = await web.reads.job(job_id)
    if doc is None:
        raise not_found(f"job not found: {job_id}")
    return doc


async def job_relations(request: Request, web: WebState) -> Any:
    job_id = params.path_int(request, "job_id")
    doc = await web.reads.relations(job_id)
    if doc is None:
        raise not_found(f"job not found: {job_id}")
    return doc


async def get_batch(request: Request, web: WebState) -> Any:
    batch_id = params.path_int(request, "batch_id")
    doc = await web.reads.batch(batch_id)
    if doc is None:
        raise not_found(f"batch not found: {batch_id} (a batch's id is its callback job's id)")
    return doc


async def job_graph(request: Request, web: WebState) -> Any:
    job_id = params.path_int(request, "job_id")
    doc = await web.reads.graph(job_id)
    if doc is None:
        raise not_found(f"job not found: {job_id}")
    return doc


async def retry_job(request: Request, web: WebState) -> Any:
    return await actions.retry_job(web, params.path_int(request, "job_id"))


async def cancel_job(request: Request, web: WebState) -> Any:
    return await actions.cancel_job(web, params.path_int(request, "job_id"))


async def bulk_retry(request: Request, web: WebState) -> Any:
    return await actions.bulk(web, "retry", params.id_list(await params.body(request)))


async def bulk_cancel(request: Request, web: WebState) -> Any:
    return await actions.bulk(web, "cancel", params.id_list(await params.body(request)))


# ---------------------------------------------------------------------- stats
async def stats(request: Request, web: WebState) -> Any:
    return await web.reads.stats(dead_lettered_as_failed=True)


async def timeseries(request: Request, web: WebState) -> Any:
    minutes = params.integer(request, "minutes", minimum=1) or 60
    if minutes > MAX_TIMESERIES_MINUTES:
        raise bad_request(f"minutes must be <= {MAX_TIMESERIES_MINUTES}")
    return await web.reads.timeseries(minutes)


async def stat_kinds(request: Request, web: WebState) -> Any:
    return await web.reads.kind_names()


async def stat_queues(request: Request, web: WebState) -> Any:
    return await web.reads.queue_names()


# ---------------------------------------------------------------------- queues and kinds
async def list_queues(request: Request, web: WebState) -> Any:
    return await web.reads.queues()


async def queue_runtime(request: Request, web: WebState) -> Any:
    return await web.reads.queue_runtime()


async def get_queue(request: Request, web: WebState) -> Any:
    name = params.path_text(request, "queue")
    doc = await web.reads.queue(name)
    if doc is None:
        raise not_found(f"queue not found: {name}")
    return doc


async def queue_keys(request: Request, web: WebState) -> Any:
    limit = params.integer(request, "limit", minimum=1)
    return await web.reads.queue_keys(
        params.path_text(request, "queue"), key_limit(KEY_LIMIT if limit is None else limit)
    )


async def pause_queue(request: Request, web: WebState) -> Any:
    doc = await params.body(request, required=True)
    return await actions.pause_queue(
        web, params.path_text(request, "queue"), params.optional_str(doc, "paused_by")
    )


async def resume_queue(request: Request, web: WebState) -> Any:
    return await actions.resume_queue(web, params.path_text(request, "queue"))


async def drain_queue(request: Request, web: WebState) -> Any:
    return await actions.drain_queue(web, params.path_text(request, "queue"))


async def list_kinds(request: Request, web: WebState) -> Any:
    return await web.reads.kinds()


# ---------------------------------------------------------------------- DLQ
async def list_dlq(request: Request, web: WebState) -> Any:
    dlq_filter = DlqFilter(
        kind=params.text(request, "kind"),
        queue=params.text(request, "queue"),
        tag=params.text(request, "tag"),
        before_id=params.integer(request, "before_id"),
        before_dlq_at=params.timestamp(request, "before_dlq_at"),
    )
    return await web.reads.dlq(
        dlq_filter, limit=limit_of(params.integer(request, "limit", minimum=1))
    )


async def dlq_depth(request: Request, web: WebState) -> Any:
    return await web.reads.dlq_depth()


async def get_dlq(request: Request, web: WebState) -> Any:
    return await web.reads.dlq_entry(params.path_int(request, "job_id"))


async def retry_dlq(request: Request, web: WebState) -> Any:
    doc = await params.body(request)
    run_at = params.optional_str(doc, "run_at")
    return await actions.retry_dlq(
        web,
        params.path_int(request, "job_id"),
        run_at=None if run_at is None else params.parse_timestamp("run_at", run_at),
        priority=params.optional_int(doc, "priority"),
        queue=params.optional_str(doc, "queue"),
    )


async def purge_dlq(request: Request, web: WebState) -> Any:
    return await actions.purge_dlq_job(web, params.path_int(request, "job_id"))


def _dlq_bulk(action: str) -> Handler:
    async def handler(request: Request, web: WebState) -> Any:
        doc = await params.body(request)
        fields = {name: params.optional_str(doc, name) for name in ("kind", "queue", "tag")}
        if action == "move":
            fields["reason"] = params.optional_str(doc, "reason")
        return await actions.dlq_bulk(
            web, action, {**fields, "all": params.optional_bool(doc, "all")}
        )

    handler.__name__ = f"dlq_bulk_{action}"
    return handler


# ---------------------------------------------------------------------- cron
async def list_cron(request: Request, web: WebState) -> Any:
    return await web.reads.cron_schedules()


def _cron(action: str) -> Handler:
    async def handler(request: Request, web: WebState) -> Any:
        paused_by = None
        if action == "pause":
            paused_by = params.optional_str(await params.body(request), "paused_by")
        return await actions.cron_action(web, params.path_text(request, "name"), action, paused_by)

    handler.__name__ = f"cron_{action}"
    return handler


# ---------------------------------------------------------------------- batch operations
async def batch_preview(request: Request, web: WebState) -> Any:
    return await actions.batch_preview(web, await params.body(request, required=True))


async def batch_submit(request: Request, web: WebState) -> Any:
    return await actions.batch_submit(web, await params.body(request, required=True))


async def batch_list(request: Request, web: WebState) -> Any:
    state = params.text(request, "state")
    limit = limit_of(params.integer(request, "limit", minimum=1))
    return await web.reads.batch_operations(state, limit)


async def batch_get(request: Request, web: WebState) -> Any:
    return await web.reads.batch_operation(params.path_text(request, "operation_id"))


async def batch_patch(request: Request, web: WebState) -> Any:
    doc = await params.body(request, required=True)
    if doc != {"state": "cancelling"}:
        raise bad_request('only {"state": "cancelling"} is accepted')
    return await actions.batch_cancel(web, params.path_text(request, "operation_id"))


# ---------------------------------------------------------------------- runtimes and storage
async def runtime(request: Request, web: WebState) -> Any:
    return await web.reads.runtime()


async def storage(request: Request, web: WebState) -> Any:
    report = dict(await web.reads.storage())
    if params.boolean(request, "history"):
        # Transition history is not recorded yet; the key is kept for API compatibility.
        report["history"] = []
    return report


def routes(callback_prefix: str) -> list[BaseRoute]:
    """Every ``/api`` route except the callback receiver's."""
    get, post = ["GET"], ["POST"]
    table: list[tuple[str, Handler, list[str]]] = [
        ("/capabilities", capabilities, get),
        ("/jobs", list_jobs, get),
        ("/jobs/bulk-retry", bulk_retry, post),
        ("/jobs/bulk-cancel", bulk_cancel, post),
        ("/jobs/{job_id}", get_job, get),
        ("/jobs/{job_id}/relations", job_relations, get),
        ("/jobs/{job_id}/graph", job_graph, get),
        ("/batches/{batch_id}", get_batch, get),
        ("/jobs/{job_id}/retry", retry_job, post),
        ("/jobs/{job_id}/cancel", cancel_job, post),
        ("/stats", stats, get),
        ("/stats/timeseries", timeseries, get),
        ("/stats/kinds", stat_kinds, get),
        ("/stats/queues", stat_queues, get),
        ("/queues", list_queues, get),
        ("/queues/runtime", queue_runtime, get),
        ("/queues/{queue}", get_queue, get),
        ("/queues/{queue}/keys", queue_keys, get),
        ("/queues/{queue}/pause", pause_queue, post),
        ("/queues/{queue}/resume", resume_queue, post),
        ("/queues/{queue}/drain", drain_queue, post),
        ("/kinds", list_kinds, get),
        ("/dlq", list_dlq, get),
        ("/dlq/depth", dlq_depth, get),
        ("/dlq/bulk-retry", _dlq_bulk("retry"), post),
        ("/dlq/bulk-purge", _dlq_bulk("purge"), post),
        ("/dlq/bulk-move", _dlq_bulk("move"), post),
        ("/dlq/{job_id}", get_dlq, get),
        ("/dlq/{job_id}", purge_dlq, ["DELETE"]),
        ("/dlq/{job_id}/retry", retry_dlq, post),
        ("/cron", list_cron, get),
        ("/cron/{name}/trigger", _cron("trigger"), post),
        ("/cron/{name}/pause", _cron("pause"), post),
        ("/cron/{name}/resume", _cron("resume"), post),
        ("/batch-ops/preview", batch_preview, post),
        ("/batch-ops", batch_list, get),
        ("/batch-ops", batch_submit, post),
        ("/batch-ops/{operation_id}", batch_get, get),
        ("/batch-ops/{operation_id}", batch_patch, ["PATCH"]),
        ("/runtime", runtime, get),
        ("/storage", storage, get),
    ]
    found: list[BaseRoute] = [Route("/openapi.json", _openapi(callback_prefix), methods=get)]
    found += [Route(path, _json(h), methods=m, name=h.__name__) for path, h, m in table]
    return found
