"""Server-rendered pages. They work without JavaScript; ``static/app.js`` adds
auto-refresh, the theme switch and confirmations (progressive enhancement)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awa.domain.dependencies import waits_on_parents
from awa.domain.states import JobState
from awa.entrypoints.job_graph import KEY_LIMIT
from awa.entrypoints.web import charts, page_actions, params
from awa.entrypoints.web.errors import ApiError, status_of
from awa.entrypoints.web.reads import AdminReads, limit_of
from awa.entrypoints.web.render import render
from awa.entrypoints.web.state import web_state
from awa.ports.storage import DlqFilter, JobFilter

PAGE_SIZE = 50
#: The dashboard's charts cover this many minutes.
CHART_MINUTES = 60
SEARCH_KEYS = ("kind", "queue", "tag")


def parse_search(query: str) -> dict[str, str]:
    """``kind:send_email queue:mail tag:vip`` as ``{kind, queue, tag}``.

    Raises ``ValueError`` naming a word that is not ``key:value`` with a known key."""
    found: dict[str, str] = {}
    for word in query.split():
        key, sep, value = word.partition(":")
        if not sep or key not in SEARCH_KEYS or not value:
            raise ValueError(f"search words are kind:NAME, queue:NAME or tag:NAME, got {word!r}")
        found[key] = value
    return found


async def error_page(request: Request, status: int, message: str) -> Response:
    if not hasattr(request.app.state, "awa"):
        return Response(message, status_code=status, media_type="text/plain")
    return render(request, "error.html", status=status, status_code=status, message=message)


def _page(handler: Any) -> Any:
    async def endpoint(request: Request) -> Response:
        try:
            # Pages show whether mutations are possible and how far a replica trails.
            await web_state(request).guard.refresh()
            response: Response = await handler(request)
            return response
        except Exception as exc:
            status, message = status_of(exc)
            return await error_page(request, status, message)

    endpoint.__name__ = handler.__name__
    return endpoint


def _job_filters(request: Request) -> tuple[dict[str, str], str | None]:
    """Filters from the URL: explicit ``kind``/``queue``/``tag``/``state`` plus ``q``."""
    chosen = {k: v for k in (*SEARCH_KEYS, "state") if (v := params.text(request, k))}
    problem = None
    query = params.text(request, "q")
    if query:
        try:
            chosen.update(parse_search(query))
        except ValueError as exc:
            problem = str(exc)
    return chosen, problem


async def dashboard(request: Request) -> Response:
    web = web_state(request)
    await web.guard.refresh()
    stats = await web.reads.stats()
    finished = await web.reads.finished_per_minute(CHART_MINUTES)
    history = await web.reads.queue_history(CHART_MINUTES)
    failures = await web.reads.recent_failures(limit=10)
    return render(
        request,
        "dashboard.html",
        stats=stats,
        runtime=await web.reads.runtime(),
        queues=await web.reads.queues(),
        failures=failures,
        throughput=charts.stacked_bars(
            finished["minutes"], finished["completed"], what="completed"
        ),
        failures_chart=charts.stacked_bars(finished["minutes"], finished["failed"], what="failed"),
        depth_chart=charts.lines(history["minutes"], history["depth"], what="waiting"),
        lag_chart=charts.lines(history["minutes"], history["lag"], unit="s", what="lag"),
        chart_minutes=CHART_MINUTES,
        dlq=await web.reads.dlq_depth(),
    )


async def jobs(request: Request, *, queue: str | None = None) -> Response:
    web = web_state(request)
    chosen, problem = _job_filters(request)
    if queue is not None:
        chosen["queue"] = queue
    before_id = params.integer(request, "before_id")
    rows = await web.reads.jobs(
        JobFilter(
            kind=chosen.get("kind"),
            queue=chosen.get("queue"),
            tag=chosen.get("tag"),
            state=params.state(chosen.get("state")),
            before_id=before_id,
        ),
        limit=PAGE_SIZE,
    )
    keep = {k: v for k, v in chosen.items() if not (queue is not None and k == "queue")}
    next_url = None
    if len(rows) == PAGE_SIZE:
        next_url = "?" + urlencode({**keep, "before_id": rows[-1]["id"]})
    counts, scope = await _state_counts(web.reads, chosen)
    context: dict[str, Any] = {
        "jobs": rows,
        "state_counts": counts,
        "counts_scope": scope,
        "filters": chosen,
        "states": [str(s) for s in JobState],
        "search": params.text(request, "q") or "",
        "problem": problem,
        "next_url": next_url,
        "first_url": "?" + urlencode(keep) if before_id is not None else None,
        "base_query": keep,
    }
    if queue is not None:
        context["queue"] = await web.reads.queue(queue)
        context["queue_name"] = queue
        context["keys"] = await web.reads.queue_keys(queue, KEY_LIMIT)
        return render(request, "queue.html", **context)
    return render(request, "jobs.html", **context)


async def _state_counts(reads: AdminReads, chosen: dict[str, str]) -> tuple[dict[str, int], str]:
    """Jobs per state for the pills of a job list, and what they count: one queue's
    exact counts when the list is of a queue, else every queue's; jobs only, as the list
    shows them (dead-lettered ones are on the DLQ page). Kind and tag narrow the list but
    not the counts (no engine keeps per-kind or per-tag state counts), so the caption says
    so."""
    queue = chosen.get("queue")
    counts = await reads.stats(queue)
    scope = "all jobs" if queue is None else f"jobs in queue {queue}"
    narrowed = [k for k in ("kind", "tag") if k in chosen]
    if narrowed:
        scope += f", whatever their {' and '.join(narrowed)}"
    return counts, scope


async def jobs_page(request: Request) -> Response:
    return await jobs(request)


async def job_detail(request: Request) -> Response:
    web = web_state(request)
    job_id = params.path_int(request, "job_id")
    doc = await web.reads.job(job_id)
    if doc is None:
        raise ApiError(404, f"job not found: {job_id}")
    relations = await web.reads.relations(job_id)
    row = doc["job"]
    run_at = row.get("run_at")
    # A job waiting on its parents shows how many it waits for, not its marker run_at.
    waiting_for = (
        relations["waiting_on"]
        if relations is not None
        and run_at is not None
        and waits_on_parents(row["state"], datetime.fromisoformat(run_at))
        else None
    )
    return render(
        request, "job.html", doc=doc, job=row, relations=relations, waiting_for=waiting_for
    )


async def job_graph(request: Request) -> Response:
    web = web_state(request)
    job_id = params.path_int(request, "job_id")
    graph = await web.reads.graph(job_id)
    if graph is None:
        raise ApiError(404, f"job not found: {job_id}")
    return render(
        request, "job_graph.html", graph=graph, layout=charts.workflow_layout(graph), job_id=job_id
    )


async def queues_page(request: Request) -> Response:
    web = web_state(request)
    return render(
        request,
        "queues.html",
        queues=await web.reads.queues(),
        runtime={q["queue"]: q for q in await web.reads.queue_runtime()},
    )


async def queue_detail(request: Request) -> Response:
    return await jobs(request, queue=params.path_text(request, "queue"))


async def kinds_page(request: Request) -> Response:
    return render(request, "kinds.html", kinds=await web_state(request).reads.kinds())


async def cron_page(request: Request) -> Response:
    web = web_state(request)
    schedules = await web.reads.cron_schedules()
    paused = {q["queue"] for q in await web.reads.queues() if q["paused"]}
    return render(
        request,
        "cron.html",
        schedules=schedules,
        paused_queues=paused,
    )


async def dlq_page(request: Request) -> Response:
    web = web_state(request)
    chosen, problem = _job_filters(request)
    before_id = params.integer(request, "before_id")
    before_at = params.timestamp(request, "before_dlq_at")
    rows = await web.reads.dlq(
        DlqFilter(
            kind=chosen.get("kind"),
            queue=chosen.get("queue"),
            tag=chosen.get("tag"),
            before_id=before_id,
            before_dlq_at=before_at,
        ),
        limit=PAGE_SIZE,
    )
    keep = {k: v for k, v in chosen.items() if k in SEARCH_KEYS}
    next_url = None
    if len(rows) == PAGE_SIZE:
        last = rows[-1]
        next_url = "?" + urlencode(
            {**keep, "before_id": last["job"]["id"], "before_dlq_at": last["dlq_at"]}
        )
    return render(
        request,
        "dlq.html",
        entries=rows,
        filters=keep,
        search=params.text(request, "q") or "",
        problem=problem,
        depth=await web.reads.dlq_depth(),
        next_url=next_url,
    )


async def dlq_detail(request: Request) -> Response:
    web = web_state(request)
    job_id = params.path_int(request, "job_id")
    entry = await web.reads.dlq_entry(job_id)
    if entry is None:
        raise ApiError(404, f"no DLQ entry for job {job_id}")
    return render(request, "dlq_entry.html", entry=entry, job=entry["job"])


async def batch_page(request: Request) -> Response:
    web = web_state(request)
    operations = await web.reads.batch_operations(None, limit_of(None))
    return render(
        request,
        "batch_ops.html",
        operations=operations,
        queues=await web.reads.queue_names(),
        kinds=await web.reads.kind_names(),
    )


async def runtime_page(request: Request) -> Response:
    web = web_state(request)
    storage: dict[str, Any] | None
    try:
        storage = await web.reads.storage()
    except Exception as exc:
        storage = {"error": str(exc)}
    return render(
        request,
        "runtime.html",
        runtime=await web.reads.runtime(),
        storage=storage,
        queue_runtime=await web.reads.queue_runtime(),
    )


async def runtime_detail(request: Request) -> Response:
    instance_id = request.path_params["instance_id"]
    instance = await web_state(request).reads.runtime_instance(instance_id)
    if instance is None:
        raise ApiError(404, f"runtime not found: {instance_id}")
    return render(request, "runtime_instance.html", instance=instance)


def routes() -> list[BaseRoute]:
    get = ["GET"]
    return [
        Route("/", _page(dashboard), methods=get),
        Route("/jobs", _page(jobs_page), methods=get),
        Route("/jobs/{job_id}", _page(job_detail), methods=get),
        Route("/jobs/{job_id}/graph", _page(job_graph), methods=get),
        Route("/queues", _page(queues_page), methods=get),
        Route("/queues/{queue}", _page(queue_detail), methods=get),
        Route("/kinds", _page(kinds_page), methods=get),
        Route("/cron", _page(cron_page), methods=get),
        Route("/dlq", _page(dlq_page), methods=get),
        Route("/dlq/{job_id}", _page(dlq_detail), methods=get),
        Route("/batch-ops", _page(batch_page), methods=get),
        Route("/runtime", _page(runtime_page), methods=get),
        Route("/runtime/{instance_id}", _page(runtime_detail), methods=get),
        *page_actions.routes(),
    ]
