"""The ASGI applications: the admin server and the stand-alone callback receiver."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from awa.entrypoints.web import api, callbacks, pages
from awa.entrypoints.web.auth import AccessMiddleware
from awa.entrypoints.web.config import ServerConfig
from awa.entrypoints.web.guard import GuardMiddleware, HostPolicy
from awa.entrypoints.web.state import WebState


class ReadOnlyDatabase(Exception):
    """The callback receiver was pointed at a database it cannot write."""


def _lifespan(
    config: ServerConfig, *, require_writable: bool
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        web = WebState.open(config)
        try:
            await web.guard.refresh(max_age=0.0)
            if require_writable and web.guard.read_only:
                raise ReadOnlyDatabase(
                    f"the callback receiver needs a writable database: {web.guard.reason}"
                )
            app.state.awa = web
            yield
        finally:
            await web.client.close()

    return lifespan


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/api"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _is_api(request) or getattr(request.app.state, "json_only", False):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    return await pages.error_page(request, exc.status_code, str(exc.detail))


def _static() -> StaticFiles:
    directory = resources.files("awa.entrypoints.web").joinpath("static")
    return StaticFiles(directory=str(directory))


def host_policy(config: ServerConfig) -> HostPolicy:
    """Loopback hosts and ``allowed_hosts`` only, unless a token guards the server and no
    host was named."""
    enforce = config.auth_token is None or bool(config.allowed_hosts)
    return HostPolicy(config.allowed_hosts, enforce=enforce)


def create_app(config: ServerConfig) -> Starlette:
    """``awa serve``: the pages, the REST API under ``/api`` and the callback routes."""
    routes: list[BaseRoute] = [
        *callbacks.routes(config.callback_prefix),
        Mount("/api", routes=api.routes(config.callback_prefix)),
        Mount("/static", app=_static(), name="static"),
        *pages.routes(),
    ]
    middleware = [
        Middleware(
            GuardMiddleware,
            hosts=host_policy(config),
            max_body_bytes=config.max_body_bytes,
        ),
        Middleware(
            AccessMiddleware,
            token=config.auth_token,
            callback_prefix=config.callback_prefix,
        ),
    ]
    handlers: dict[Any, Any] = {HTTPException: _http_error}
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=_lifespan(config, require_writable=False),
    )


def create_callback_app(config: ServerConfig) -> Starlette:
    """``awa callbacks serve``: only the three callback routes; no UI, no CORS."""
    handlers: dict[Any, Any] = {HTTPException: _http_error}
    guard = Middleware(
        GuardMiddleware,
        hosts=HostPolicy(config.allowed_hosts, enforce=bool(config.allowed_hosts)),
        max_body_bytes=config.max_body_bytes,
    )
    app = Starlette(
        routes=callbacks.routes(config.callback_prefix),
        middleware=[guard],
        exception_handlers=handlers,
        lifespan=_lifespan(config, require_writable=True),
    )
    app.state.json_only = True
    return app
