"""Form posts of the pages: each checks the CSRF token, acts, and redirects back with a
notice (or the error) in the URL, so a reload never repeats the action."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from math import ceil
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from awa.entrypoints.web import actions
from awa.entrypoints.web.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    client_key,
    csrf_matches,
    same_secret,
)
from awa.entrypoints.web.errors import ApiError, bad_request, status_of
from awa.entrypoints.web.params import clean, parse_timestamp, path_text
from awa.entrypoints.web.render import render
from awa.entrypoints.web.state import WebState, web_state

log = logging.getLogger("awa.web.auth")

Action = Callable[[Request, WebState, FormData], Awaitable[str]]


def safe_target(value: str | None, default: str) -> str:
    """A same-site path to go back to (never another host)."""
    if not value or not value.startswith("/") or value.startswith("//"):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def _with(target: str, key: str, message: str) -> str:
    parts = urlsplit(target)
    query = "&".join(
        p for p in parts.query.split("&") if p and not p.startswith(("notice=", "error="))
    )
    extra = urlencode({key: message})
    return f"{parts.path}?{query + '&' if query else ''}{extra}"


def _form_action(default_back: Callable[[Request], str], act: Action) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        form = await request.form()
        back = safe_target(str(form.get("back") or ""), default_back(request))
        if not csrf_matches(request, str(form.get(CSRF_FIELD) or "")):
            return RedirectResponse(
                _with(back, "error", "the form expired (CSRF check failed); try again"), 303
            )
        try:
            message = await act(request, web_state(request), form)
        except Exception as exc:
            _, text = status_of(exc)
            return RedirectResponse(_with(back, "error", text), 303)
        return RedirectResponse(_with(back, "notice", message), 303)

    endpoint.__name__ = act.__name__
    return endpoint


def _id(request: Request) -> int:
    try:
        return int(request.path_params["job_id"])
    except ValueError:
        raise bad_request("job id must be an integer") from None


def _field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return None if value is None or str(value).strip() == "" else clean(name, str(value).strip())


# ---------------------------------------------------------------------- jobs
async def retry_job(request: Request, web: WebState, form: FormData) -> str:
    row = await actions.retry_job(web, _id(request))
    return f"Retried job {_id(request)}" if row else f"Job {_id(request)} is already runnable"


async def cancel_job(request: Request, web: WebState, form: FormData) -> str:
    row = await actions.cancel_job(web, _id(request))
    return f"Cancelled job {_id(request)}" if row else f"Job {_id(request)} already finished"


async def bulk_jobs(request: Request, web: WebState, form: FormData) -> str:
    action = _field(form, "action")
    if action not in ("retry", "cancel"):
        raise bad_request("choose retry or cancel")
    try:
        ids = [int(str(v)) for v in form.getlist("ids")]
    except ValueError:
        raise bad_request("job ids must be integers") from None
    if not ids:
        raise bad_request("select at least one job")
    changed = await actions.bulk(web, action, ids)
    verb = "Retried" if action == "retry" else "Cancelled"
    return f"{verb} {len(changed)} of {len(ids)} selected jobs"


# ---------------------------------------------------------------------- queues
async def queue_action(request: Request, web: WebState, form: FormData) -> str:
    queue = path_text(request, "queue")
    action = request.path_params["action"]
    if action == "pause":
        await actions.pause_queue(web, queue, _field(form, "paused_by"))
        return f"Paused {queue}"
    if action == "resume":
        await actions.resume_queue(web, queue)
        return f"Resumed {queue}"
    if action == "drain":
        result = await actions.drain_queue(web, queue)
        return f"Drained {queue}: cancelled {result['drained']} jobs"
    raise ApiError(404, f"unknown queue action {action!r}")


# ---------------------------------------------------------------------- DLQ
async def dlq_retry(request: Request, web: WebState, form: FormData) -> str:
    run_at = _field(form, "run_at")
    priority = _field(form, "priority")
    row = await actions.retry_dlq(
        web,
        _id(request),
        run_at=None if run_at is None else parse_timestamp("run_at", run_at),
        priority=None if priority is None else int(priority),
        queue=_field(form, "queue"),
    )
    return f"Retried job {_id(request)} from the DLQ" if row else "No such DLQ entry"


async def dlq_purge(request: Request, web: WebState, form: FormData) -> str:
    result = await actions.purge_dlq_job(web, _id(request))
    return f"Purged {result['count']} DLQ entry"


async def dlq_bulk(request: Request, web: WebState, form: FormData) -> str:
    action = _field(form, "action")
    if action not in ("retry", "purge"):
        raise bad_request("choose retry or purge")
    doc = {k: _field(form, k) for k in ("kind", "queue", "tag")}
    result = await actions.dlq_bulk(web, action, {**doc, "all": _field(form, "all") == "1"})
    verb = "Retried" if action == "retry" else "Purged"
    return f"{verb} {result['count']} DLQ entries"


# ---------------------------------------------------------------------- cron and batch ops
async def cron_action(request: Request, web: WebState, form: FormData) -> str:
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in ("trigger", "pause", "resume"):
        raise ApiError(404, f"unknown cron action {action!r}")
    await actions.cron_action(web, name, action, _field(form, "paused_by"))
    return {"trigger": f"Triggered {name}", "pause": f"Paused {name}", "resume": f"Resumed {name}"}[
        action
    ]


async def batch_submit(request: Request, web: WebState, form: FormData) -> str:
    op_kind = _field(form, "op_kind")
    spec: dict[str, Any] = {}
    if op_kind == "set_priority":
        spec["priority"] = int(_field(form, "priority") or "2")
    elif op_kind == "move_queue":
        spec["queue"] = _field(form, "target_queue")
        if _field(form, "priority"):
            spec["priority"] = int(str(_field(form, "priority")))
    op_filter = {k: v for k in ("kind", "queue", "tag", "state") if (v := _field(form, k))}
    doc = {"op_kind": op_kind, "spec": spec, "filter": op_filter, "all": _field(form, "all") == "1"}
    if _field(form, "preview"):
        preview = await actions.batch_preview(web, doc)
        return f"Preview: {preview.get('total_matched', 0)} jobs match"
    op = await actions.batch_submit(web, doc)
    return f"Submitted batch operation {op.get('id')}"


async def batch_cancel(request: Request, web: WebState, form: FormData) -> str:
    op = await actions.batch_cancel(web, request.path_params["operation_id"])
    return f"Cancelling batch operation {op.get('id')}"


# ---------------------------------------------------------------------- login
async def login(request: Request) -> Response:
    web = web_state(request)
    target = safe_target(request.query_params.get("next"), "/")
    if web.config.auth_token is None or web.sessions is None:
        return RedirectResponse(target, 303)
    if request.method == "GET":
        return render(request, "login.html", target=target, wrong=False)
    form = await request.form()
    target = safe_target(str(form.get("next") or ""), "/")
    client, now = client_key(request), web.clock()
    wait = web.throttle.wait(client, now)
    if wait > 0:
        refused = render(request, "login.html", status=429, target=target, wait=ceil(wait))
        refused.headers["Retry-After"] = str(max(1, ceil(wait)))
        return refused
    if not csrf_matches(request, str(form.get(CSRF_FIELD) or "")):
        return render(request, "login.html", status=401, target=target, wrong=True)
    if not same_secret(str(form.get("token") or ""), web.config.auth_token):
        web.throttle.failed(client, now)
        log.warning("wrong token at /login from %s", client)
        return render(request, "login.html", status=401, target=target, wrong=True)
    web.throttle.succeeded(client)
    response = RedirectResponse(target, 303)
    response.set_cookie(
        SESSION_COOKIE,
        web.sessions.issue(now),
        max_age=int(web.sessions.ttl),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """End the session: its id is revoked here, so a copy of the cookie stops working."""
    web = web_state(request)
    cookie = request.cookies.get(SESSION_COOKIE, "")
    if web.sessions is not None and cookie:
        web.sessions.revoke(cookie, web.clock())
    response = RedirectResponse("/login", 303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def routes() -> list[BaseRoute]:
    post = ["POST"]

    def job_page(r: Request) -> str:
        return f"/jobs/{quote(str(r.path_params.get('job_id', '')))}"

    def jobs_list(r: Request) -> str:
        return "/jobs"

    def queue_page(r: Request) -> str:
        return f"/queues/{quote(r.path_params['queue'])}"

    def dlq_list(r: Request) -> str:
        return "/dlq"

    def cron_list(r: Request) -> str:
        return "/cron"

    def batch_list(r: Request) -> str:
        return "/batch-ops"

    return [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=post),
        Route("/jobs/bulk", _form_action(jobs_list, bulk_jobs), methods=post),
        Route("/jobs/{job_id}/retry", _form_action(job_page, retry_job), methods=post),
        Route("/jobs/{job_id}/cancel", _form_action(job_page, cancel_job), methods=post),
        Route("/queues/{queue}/{action}", _form_action(queue_page, queue_action), methods=post),
        Route("/dlq/bulk", _form_action(dlq_list, dlq_bulk), methods=post),
        Route("/dlq/{job_id}/retry", _form_action(dlq_list, dlq_retry), methods=post),
        Route("/dlq/{job_id}/purge", _form_action(dlq_list, dlq_purge), methods=post),
        Route("/cron/{name}/{action}", _form_action(cron_list, cron_action), methods=post),
        Route("/batch-ops", _form_action(batch_list, batch_submit), methods=post),
        Route(
            "/batch-ops/{operation_id}/cancel", _form_action(batch_list, batch_cancel), methods=post
        ),
    ]
