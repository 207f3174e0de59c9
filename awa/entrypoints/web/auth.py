"""Access control of the admin server.

* ``--auth-token`` (``AWA_UI_TOKEN``): the API wants ``Authorization: Bearer <token>``;
  pages send people to ``/login``, which sets an HttpOnly cookie holding a signed,
  expiring session (``sessions.SessionStore``) that logout ends. Comparisons are
  constant-time. After five wrong tokens from one client (login form or bearer) it must
  wait, 1 s doubling up to 15 min, and meanwhile gets 429 with ``Retry-After``.
* Page mutations carry a CSRF token (a random cookie echoed in a hidden form field or in
  the ``X-CSRF-Token`` header of the pages' own fetches); API calls authenticated by the
  session cookie need the header too.
* Any mutation a browser sends from another site (``Origin`` of another host, or
  ``Sec-Fetch-Site: cross-site``) is refused, token or not.
* The callback routes authenticate by signature when a callback secret is set. With a
  token and no secret they want the bearer token like the rest of the API.
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from awa.entrypoints.web.state import web_state

log = logging.getLogger("awa.web.auth")

SESSION_COOKIE = "awa_session"
CSRF_COOKIE = "awa_csrf"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
NEW_CSRF_KEY = "awa.new_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PREFIXES = ("/static/", "/login", "/api/openapi.json")


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison that treats any text (non-ASCII included) as a mismatch
    rather than an error."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def bearer_given(request: Request) -> str | None:
    """The bearer token of the request, if it sends one."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


def session_ok(request: Request) -> bool:
    web = web_state(request)
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return web.sessions is not None and bool(cookie) and web.sessions.valid(cookie, web.clock())


def client_key(request: Request) -> str:
    """Who failed a login: the peer address (behind a proxy, the proxy's)."""
    return request.client.host if request.client else "unknown"


def too_many(wait: float) -> Response:
    seconds = max(1, math.ceil(wait))
    response = JSONResponse(
        {"error": f"too many wrong tokens from this client; try again in {seconds} s"},
        status_code=429,
    )
    response.headers["Retry-After"] = str(seconds)
    return response


def csrf_token(request: Request) -> str:
    """This browser's CSRF token (a new one when it has none yet)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing:
        return existing
    token: str = request.scope.setdefault(NEW_CSRF_KEY, secrets.token_urlsafe(32))
    return token


def csrf_matches(request: Request, given: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    return bool(cookie) and given is not None and hmac.compare_digest(cookie, given)


def cross_site(request: Request) -> bool:
    """Whether a browser sent this request from another site."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin == "null"
    return urlsplit(origin).netloc != request.headers.get("host", "")


class AccessMiddleware(BaseHTTPMiddleware):
    def __init__(self, app: object, *, token: str | None, callback_prefix: str | None) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.token = token
        self.callback_prefix = callback_prefix

    def _is_callback(self, path: str) -> bool:
        prefix = self.callback_prefix
        return prefix is not None and path.startswith(prefix + "/")

    def _bearer(self, request: Request, token: str) -> Response | None:
        """``None`` when the request carries the right bearer token, else the refusal
        (a wrong token counts as a failed login)."""
        web = web_state(request)
        client, now = client_key(request), web.clock()
        wait = web.throttle.wait(client, now)
        if wait > 0:
            return too_many(wait)
        given = bearer_given(request)
        if given is not None and same_secret(given, token):
            web.throttle.succeeded(client)
            return None
        if given is not None:
            web.throttle.failed(client, now)
            log.warning("wrong bearer token from %s for %s", client, request.url.path)
        response = _deny(True, 401, "authentication required: send a bearer token")
        response.headers["WWW-Authenticate"] = 'Bearer realm="awa"'
        return response

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        api = path.startswith("/api/") or path == "/api"
        if self._is_callback(path):
            # Signed callbacks check their signature in the handler; without a secret,
            # a token must not leave them the one open door.
            if self.token is not None and web_state(request).config.callback_secret is None:
                refused = self._bearer(request, self.token)
                if refused is not None:
                    return refused
            return await call_next(request)
        mutation = request.method not in SAFE_METHODS
        if mutation and cross_site(request):
            return _deny(api, 403, "cross-site request refused")
        if self.token is not None and not path.startswith(PUBLIC_PREFIXES):
            if api:
                if session_ok(request) and bearer_given(request) is None:
                    if mutation and not csrf_matches(request, request.headers.get(CSRF_HEADER)):
                        return _deny(True, 403, f"missing or wrong {CSRF_HEADER} header")
                else:
                    refused = self._bearer(request, self.token)
                    if refused is not None:
                        return refused
            elif not session_ok(request):
                target = path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        response = await call_next(request)
        new = request.scope.get(NEW_CSRF_KEY)
        if new is not None:
            response.set_cookie(CSRF_COOKIE, new, httponly=False, samesite="strict", path="/")
        return response


def _deny(api: bool, status: int, message: str) -> Response:
    if api:
        return JSONResponse({"error": message}, status_code=status)
    return Response(message, status_code=status, media_type="text/plain")
