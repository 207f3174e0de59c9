"""The worker health listener: ``GET /healthz``, ``GET /readyz`` and ``GET /metrics``.

``/healthz`` answers 200 while the process is up, draining included: liveness never
depends on the database. ``/readyz`` answers 200 only when every readiness check passes,
otherwise 503; both bodies are JSON naming each check (``leader`` is informational).
``/metrics`` serves the Prometheus text format (needs the ``otel`` extra; 501 without).

A deliberately small HTTP/1.1 server on the worker's event loop (one request per
connection, no TLS, no auth): bind it to the pod IP or loopback, never a public address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from awa.domain.errors import ValidationError

log = logging.getLogger("awa.health")

HEALTH_ADDR_ENV = "AWA_HEALTH_ADDR"
_MAX_HEADER_BYTES = 16 * 1024
_READ_TIMEOUT = 5.0

Readiness = Callable[[], Awaitable[dict[str, Any]]]
Metrics = Callable[[], tuple[bytes, str]]


def parse_addr(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6; port 0 picks a free port)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("health_addr", "must be HOST:PORT, e.g. 0.0.0.0:8321")
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not host:
        raise ValidationError("health_addr", f"{value!r} must be HOST:PORT, e.g. 0.0.0.0:8321")
    host = host.removeprefix("[").removesuffix("]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValidationError("health_addr", f"{value!r}: port must be a number") from None
    if not 0 <= port <= 65535:
        raise ValidationError("health_addr", f"{value!r}: port must be between 0 and 65535")
    return host, port


def addr_from_env() -> str | None:
    """``AWA_HEALTH_ADDR`` when set and not empty."""
    value = os.environ.get(HEALTH_ADDR_ENV, "").strip()
    return value or None


class HealthListener:
    """Serves the probes for one worker; ``readiness()`` returns the ``/readyz`` body
    (with a boolean ``ready``)."""

    def __init__(self, addr: str, readiness: Readiness, metrics: Metrics | None = None) -> None:
        self._host, self._port = parse_addr(addr)
        self._readiness = readiness
        self._metrics = metrics
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)`` (the real port when 0 was asked for)."""
        if self._server is None or not self._server.sockets:
            return self._host, self._port
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"health listener cannot bind {self._host}:{self._port}: {exc.strerror}; "
                f"choose another {HEALTH_ADDR_ENV} / --health-addr",
            ) from exc
        host, port = self.address
        log.info("health listener on http://%s:%d (/healthz, /readyz, /metrics)", host, port)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):  # keeps a cancel, unlike wait_for
                status, body, content_type = await self._answer(reader)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            status, body, content_type = 400, _json({"error": "malformed request"}), _JSON
        except Exception:
            log.warning("health listener request failed", exc_info=True)
            status, body, content_type = 500, _json({"error": "internal error"}), _JSON
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode("ascii") + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, bytes, str]:
        raw = await reader.readuntil(b"\r\n\r\n")
        if len(raw) > _MAX_HEADER_BYTES:
            return 431, _json({"error": "request headers too large"}), _JSON
        request_line = raw.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3:
            return 400, _json({"error": "malformed request line"}), _JSON
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if path not in ("/healthz", "/readyz", "/metrics"):
            return 404, _json({"error": f"not found: {path}"}), _JSON
        if method != "GET":
            return 405, _json({"error": f"method {method} not allowed; use GET"}), _JSON
        if path == "/healthz":
            return 200, _json({"status": "ok"}), _JSON
        if path == "/readyz":
            report = await self._readiness()
            return (200 if report["ready"] else 503), _json(report), _JSON
        if self._metrics is None:
            return 501, _json({"error": "metrics are not enabled"}), _JSON
        try:
            body, content_type = self._metrics()
        except Exception as exc:
            return 501, _json({"error": str(exc)}), _JSON
        return 200, body, content_type


_JSON = "application/json"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode() + b"\n"
