"""The outermost layer of both servers: which ``Host`` is served, how large a body may
be, and the security headers every response carries.

* **Host.** Without ``--auth-token`` anyone whose browser reaches the port could act, and
  a DNS-rebinding page reaches a loopback port under its own host name. So the server
  answers only requests whose ``Host`` is a loopback name (``localhost``, ``127.x.y.z``,
  ``[::1]``, any port) or one named by ``--allowed-host``; others get 400. With a token
  and no ``--allowed-host`` every host is served (a rebinding page holds no token).
* **Body size.** A declared ``Content-Length`` over the limit gets 413 before anything is
  read; a chunked body is counted as it streams and the read fails with 413 at the limit,
  so no request holds more than the limit in memory.
* **Headers.** ``Content-Security-Policy`` (own scripts and styles only, no framing),
  ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff`` and
  ``Referrer-Policy: same-origin`` on every page, API and error response.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from awa.entrypoints.web.errors import ApiError
from awa.entrypoints.web.limits import DEFAULT_MAX_BODY_BYTES

__all__ = ["DEFAULT_MAX_BODY_BYTES", "GuardMiddleware", "HostPolicy", "parse_allowed_hosts"]

log = logging.getLogger("awa.web")

#: ``--allowed-host *``: serve every Host header.
ANY_HOST = "*"
#: Where a page's style nonce is kept in the ASGI scope (read by the templates).
NONCE_KEY = "awa.csp_nonce"


def host_name(header: str) -> str:
    """The host of a ``Host`` header without its port, lowercased (``[::1]:3000`` is
    ``::1``)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def is_loopback_name(host: str) -> bool:
    """``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_allowed_hosts(values: Iterable[str]) -> tuple[str, ...]:
    """Host names from ``--allowed-host`` (repeatable, comma or space separated), each
    without a port; ``*`` serves every host."""
    found: list[str] = []
    for value in values:
        for part in value.replace(",", " ").split():
            raw = part.strip().lower()
            if raw != ANY_HOST and (any(c in raw for c in "/?#@\\*") or not host_name(raw)):
                raise ValueError(f"--allowed-host wants a host name without port, got {part!r}")
            name = raw if raw == ANY_HOST else host_name(raw)
            found.append(name)
    return tuple(dict.fromkeys(found))


class HostPolicy:
    """Which ``Host`` headers a server answers."""

    def __init__(self, allowed: Iterable[str], *, enforce: bool) -> None:
        self.allowed = frozenset(allowed)
        self.enforce = enforce and ANY_HOST not in self.allowed

    def accepts(self, header: str | None) -> bool:
        if not self.enforce:
            return True
        if not header:
            return False
        name = host_name(header)
        return is_loopback_name(name) or name in self.allowed


class BodyTooLarge(ApiError):
    """The request body passed the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {limit} bytes")


def content_security_policy(nonce: str | None) -> str:
    style = "'self'" + (f" 'nonce-{nonce}'" if nonce else "")
    return (
        "default-src 'self'; script-src 'self'; "
        f"style-src {style}; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


class GuardMiddleware:
    """Host check, body limit and security headers (pure ASGI, so the body is never
    buffered here)."""

    def __init__(self, app: ASGIApp, *, hosts: HostPolicy, max_body_bytes: int) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        if not self.hosts.accepts(host):
            log.warning("refused a request for Host %r (not loopback nor --allowed-host)", host)
            await _send_json(
                send,
                400,
                f"Host {host!r} is not served: without --auth-token only loopback hosts "
                "and those named by --allowed-host (AWA_ALLOWED_HOSTS) are",
            )
            return
        limit = self.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _send_json(send, 400, f"Content-Length is not a number: {declared!r}")
                return
            if size > limit:
                await _send_json(send, 413, BodyTooLarge(limit).message)
                return
        scope[NONCE_KEY] = secrets.token_urlsafe(16)
        started = False
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": _secured(message.get("headers", []), scope)}
            await send(message)

        try:
            await self.app(scope, counted_receive, send_with_headers)
        except Exception as exc:
            too_large = _body_too_large(exc)
            if too_large is None or started:
                raise
            await _send_json(send, 413, too_large.message)


def _body_too_large(exc: BaseException) -> BodyTooLarge | None:
    """The :class:`BodyTooLarge` in ``exc``, also when a task group wrapped it (the
    middleware between here and the handler reads the body in a task)."""
    if isinstance(exc, BodyTooLarge):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _body_too_large(inner)
            if found is not None:
                return found
    return None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _secured(raw: list[tuple[bytes, bytes]], scope: Scope) -> list[tuple[bytes, bytes]]:
    present = {k.lower() for k, _ in raw}
    extra = [
        (b"content-security-policy", content_security_policy(scope.get(NONCE_KEY)).encode()),
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"same-origin"),
    ]
    return [*raw, *((k, v) for k, v in extra if k not in present)]


async def _send_json(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": _secured(headers, {})})
    await send({"type": "http.response.body", "body": body})
