"""The health listener's HTTP surface and the worker command's option checks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from awa.domain.errors import ValidationError
from awa.entrypoints.cli import cli
from awa.entrypoints.health import HealthListener, parse_addr


async def _request(port: int, raw: bytes) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def test_routes_methods_and_malformed_requests() -> None:
    ready = {"value": True}

    async def readiness() -> dict[str, Any]:
        return {"ready": ready["value"], "checks": {"postgres_connected": ready["value"]}}

    async def scenario() -> None:
        listener = HealthListener("127.0.0.1:0", readiness)
        await listener.start()
        port = listener.address[1]
        try:
            assert (await _request(port, b"GET /healthz HTTP/1.1\r\n\r\n"))[0] == 200
            assert (await _request(port, b"GET /readyz?x=1 HTTP/1.1\r\n\r\n"))[0] == 200
            ready["value"] = False
            status, body = await _request(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 503 and body["checks"] == {"postgres_connected": False}
            status, body = await _request(port, b"GET /admin HTTP/1.1\r\n\r\n")
            assert status == 404 and "/admin" in body["error"]
            assert (await _request(port, b"POST /healthz HTTP/1.1\r\n\r\n"))[0] == 405
            assert (await _request(port, b"garbage\r\n\r\n"))[0] == 400
            # Without a metrics source /metrics says so rather than serving nothing.
            assert (await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 501
        finally:
            await listener.close()

    asyncio.run(scenario())


def test_a_request_that_never_ends_is_answered_400_at_the_read_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that sends part of a request and waits is answered ``400`` once the read
    bound passes, not held open (the bound, 5 s, shortened here)."""
    from awa.entrypoints import health

    monkeypatch.setattr(health, "_READ_TIMEOUT", 0.05)

    async def readiness() -> dict[str, Any]:
        return {"ready": True, "checks": {}}

    async def scenario() -> None:
        listener = HealthListener("127.0.0.1:0", readiness)
        await listener.start()
        try:
            status, body = await _request(listener.address[1], b"GET /healthz HTTP/1.1\r\n")
            assert (status, body) == (400, {"error": "malformed request"})
        finally:
            await listener.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("bad", ["", "8321", "host:", "host:port", "host:70000", ":80"])
def test_bad_addresses_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="health_addr"):
        parse_addr(bad)


def test_addresses() -> None:
    assert parse_addr("0.0.0.0:8321") == ("0.0.0.0", 8321)
    assert parse_addr("[::1]:0") == ("::1", 0)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    awa_level = logging.getLogger("awa").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("awa").setLevel(awa_level)
    logging.captureWarnings(False)


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["--database-url", "postgresql://unused", *args])


@pytest.mark.usefixtures("restore_logging")
def test_worker_option_errors() -> None:
    bad_addr = _invoke("worker", "--module", "m", "--health-addr", "nope")
    assert bad_addr.exit_code == 2 and "--health-addr" in bad_addr.output
    shared = _invoke("worker", "--module", "m", "--processes", "2", "--health-addr", "0.0.0.0:8321")
    assert shared.exit_code == 2 and "cannot be shared by 2 processes" in shared.output
    bad_format = _invoke("worker", "--module", "m", "--log-format", "xml")
    assert bad_format.exit_code == 2 and "--log-format" in bad_format.output
    for command in ("worker", "dev"):
        help_text = _invoke(command, "--help").output
        assert "--log-level" in help_text and "AWA_LOG_FORMAT" in help_text
