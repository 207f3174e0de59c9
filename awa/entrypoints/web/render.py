"""Jinja2 rendering of the pages, with what every page's layout needs."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from awa.domain.descriptors import STATUS_MEANINGS
from awa.entrypoints.web.auth import csrf_token
from awa.entrypoints.web.guard import NONCE_KEY
from awa.entrypoints.web.state import web_state

NAV = [
    ("/", "Dashboard"),
    ("/jobs", "Jobs"),
    ("/queues", "Queues"),
    ("/kinds", "Kinds"),
    ("/cron", "Cron"),
    ("/dlq", "DLQ"),
    ("/batch-ops", "Batch ops"),
    ("/runtime", "Runtime"),
]


def _ago(value: str | None) -> str:
    if not value:
        return "—"
    try:
        then = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    seconds = (datetime.now(UTC) - then).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{int(seconds)}s"
    elif seconds < 3600:
        text = f"{int(seconds // 60)}m"
    elif seconds < 86400:
        text = f"{int(seconds // 3600)}h"
    else:
        text = f"{int(seconds // 86400)}d"
    return f"in {text}" if future else f"{text} ago"


def web_link(value: Any) -> str | None:
    """``value`` when it is an absolute http(s) URL, else ``None``: a ``javascript:`` or
    ``data:`` URL from a descriptor is shown as text, never as a link."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return value.strip()


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


NONE_TEXT = "—"


def human(value: Any) -> Markup:
    """A value as a person reads it, never a Python repr: ``None`` as —, booleans as
    yes/no, a list as a list (— when empty), a mapping as ``key: value`` lines, numbers
    and text as they are. Escaped, safe to place in a page."""
    if value is None:
        return Markup(NONE_TEXT)
    if isinstance(value, bool):
        return Markup("yes" if value else "no")
    if isinstance(value, list | tuple | set | frozenset):
        if not value:
            return Markup(NONE_TEXT)
        items = "".join(f"<li>{human(item)}</li>" for item in value)
        return Markup(f'<ul class="plain">{items}</ul>')
    if isinstance(value, dict):
        if not value:
            return Markup(NONE_TEXT)
        rows = "".join(f"<dt>{escape(label(k))}</dt><dd>{human(v)}</dd>" for k, v in value.items())
        return Markup(f'<dl class="inner">{rows}</dl>')
    return escape(str(value))


def label(key: Any) -> str:
    """A field name as a heading: ``finalize_blockers`` reads "Finalize blockers"."""
    text = str(key).replace("_", " ").strip()
    return text[:1].upper() + text[1:]


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("awa.entrypoints.web", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = _ago
    env.filters["pretty"] = _pretty
    env.filters["human"] = human
    env.filters["label"] = label
    env.filters["web_link"] = web_link
    env.globals["descriptor_meanings"] = STATUS_MEANINGS
    return env


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    web = web_state(request)
    config = web.config
    path = request.url.path
    active = max(
        (href for href, _ in NAV if path == href or (href != "/" and path.startswith(href))),
        key=len,
        default="/",
    )
    base = {
        "request": request,
        "nav": NAV,
        "active": active,
        "read_only": web.guard.read_only,
        "read_only_reason": web.guard.reason,
        "replica": web.guard.replica,
        "instance_name": config.instance_name,
        "instance_color": config.instance_color,
        "peers": config.peers,
        "poll_interval_ms": config.poll_interval_ms,
        "csrf": csrf_token(request),
        "csp_nonce": request.scope.get(NONCE_KEY, ""),
        "auth": config.auth_token is not None,
        "notice": request.query_params.get("notice"),
        "failure": request.query_params.get("error"),
    }
    html = environment().get_template(template).render(**base, **context)
    return HTMLResponse(html, status_code=status)
