"""Access control of the admin server.

* ``--auth-token`` (``AWA_UI_TOKEN``): the API wants ``Authorization: Bearer <token>``;
  pages send people to ``/login``, which sets an HttpOnly session cookie derived from the
  token (changing the token ends every session). Comparisons are constant-time.
* Page mutations carry a CSRF token (a random cookie echoed in a hidden form field or in
  the ``X-CSRF-Token`` header of the pages' own fetches); API calls authenticated by the
  session cookie need the header too.
* Any mutation a browser sends from another site (``Origin`` of another host, or
  ``Sec-Fetch-Site: cross-site``) is refused, token or not.
* The callback receiver authenticates by signature instead and is exempt.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

SESSION_COOKIE = "awa_session"
CSRF_COOKIE = "awa_csrf"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
NEW_CSRF_KEY = "awa.new_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PREFIXES = ("/static/", "/login", "/api/openapi.json")


def session_value(token: str) -> str:
    """The session cookie for ``token`` (never the token itself)."""
    return hmac.new(token.encode(), b"awa-ui-session", hashlib.sha256).hexdigest()


def bearer_ok(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def session_ok(request: Request, token: str) -> bool:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie, session_value(token))


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

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        api = path.startswith("/api/") or path == "/api"
        if self._is_callback(path):
            return await call_next(request)
        mutation = request.method not in SAFE_METHODS
        if mutation and cross_site(request):
            return _deny(api, 403, "cross-site request refused")
        if self.token is not None and not path.startswith(PUBLIC_PREFIXES):
            if api:
                if bearer_ok(request, self.token):
                    pass
                elif session_ok(request, self.token):
                    if mutation and not csrf_matches(request, request.headers.get(CSRF_HEADER)):
                        return _deny(True, 403, f"missing or wrong {CSRF_HEADER} header")
                else:
                    response = _deny(True, 401, "authentication required: send a bearer token")
                    response.headers["WWW-Authenticate"] = 'Bearer realm="awa"'
                    return response
            elif not session_ok(request, self.token):
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
