"""``awa serve`` hardened: Host check, body limit, security headers, sessions that logout
ends, slowed-down guessing, callbacks behind the token, request signatures."""

from __future__ import annotations

import http.client
import importlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from awa.callback_contract import (
    REQUEST_SIGNATURE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    sign_callback_request,
)
from awa.entrypoints.cli import cli
from awa.entrypoints.web.config import ServerConfig
from awa.entrypoints.web.sessions import FREE_FAILURES
from tests.integration.web.conftest import AppFactory
from tests.integration.web.live import live_server
from tests.integration.web.test_auth_callbacks import csrf_of, waiting_job

pytestmark = pytest.mark.postgres

TOKEN = "hardening-token"
SECRET = bytes(range(32))
SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def clocked(client: TestClient) -> Clock:
    clock = Clock()
    client.app.state.awa.clock = clock  # type: ignore[attr-defined]
    return clock


def test_without_a_token_only_loopback_and_allowed_hosts_are_served(
    make_client: AppFactory,
) -> None:
    client = make_client()
    for host in ("localhost:3000", "127.0.0.1", "[::1]:3000"):
        assert client.get("/api/stats", headers={"Host": host}).status_code == 200, host
    for host in ("rebind.example:3000", "10.1.2.3:3000"):
        refused = client.post("/api/queues/mail/pause", json={}, headers={"Host": host})
        assert refused.status_code == 400, host
        assert "--allowed-host" in refused.json()["error"]
        assert all(h in refused.headers for h in SECURITY_HEADERS)
    assert not any(q["paused"] for q in client.get("/api/queues").json())
    assert client.post("/api/queues/mail/pause", json={}).status_code == 200
    assert any(q["queue"] == "mail" and q["paused"] for q in client.get("/api/queues").json())
    named = make_client(allowed_hosts=("admin.example",))
    assert named.get("/api/stats", headers={"Host": "admin.example"}).status_code == 200
    assert named.get("/api/stats", headers={"Host": "other.example"}).status_code == 400
    # A token guards the server: any host, unless hosts are named.
    tokened = make_client(auth_token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert tokened.get("/api/stats", headers={**bearer, "Host": "a.example"}).status_code == 200
    strict = make_client(auth_token=TOKEN, allowed_hosts=("admin.example",))
    assert strict.get("/api/stats", headers={**bearer, "Host": "a.example"}).status_code == 400


def test_bodies_over_the_limit_get_413(make_client: AppFactory) -> None:
    client = make_client(max_body_bytes=1024)
    big = client.post("/api/queues/mail/pause", content=b"{" + b" " * 2000 + b"}")
    assert big.status_code == 413 and "1024 bytes" in big.json()["error"]
    chunked = client.post(
        "/api/queues/mail/pause", content=iter([b'{"paused_by": "', b"x" * 2000, b'"}'])
    )
    assert chunked.status_code == 413
    form = client.post("/jobs/bulk", data={"csrf": "x", "ids": ["1"] * 500})
    assert form.status_code == 413
    assert client.post("/api/queues/mail/pause", json={}).status_code == 200


def test_every_response_carries_the_security_headers(make_client: AppFactory) -> None:
    client = make_client()
    for path in ("/", "/api/stats", "/api/jobs/999999999", "/nope", "/static/app.js", "/login"):
        response = client.get(path)
        for header in SECURITY_HEADERS:
            assert header in response.headers, (path, header)
    page = client.get("/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "<script>" not in page.text  # no inline script: the policy would block it
    colored = make_client(instance_color="#0af")
    page = colored.get("/")
    nonce = re.search(r"'nonce-([^']+)'", page.headers["content-security-policy"])
    assert nonce and f'<style nonce="{nonce.group(1)}">' in page.text


def test_nested_json_and_non_ascii_signatures_get_4xx(
    make_client: AppFactory, migrated_database_url: str
) -> None:
    client = make_client(callback_secret=SECRET)
    deep = "[" * 100_000 + "]" * 100_000
    nested = client.post(
        "/api/queues/mail/pause", content=deep, headers={"Content-Type": "application/json"}
    )
    assert nested.status_code == 400 and "nested" in nested.json()["error"]
    _job, cid = waiting_job(migrated_database_url)
    weird = client.post(
        f"/api/callbacks/{cid}/complete",
        json={},
        headers={SIGNATURE_HEADER.encode(): "é".encode() * 32},
    )
    assert weird.status_code == 401, weird.text


def test_sessions_expire_end_at_logout_and_guessing_slows_down(
    make_client: AppFactory,
) -> None:
    client = make_client(auth_token=TOKEN, session_ttl=600.0)
    clock = clocked(client)

    def login(token: str) -> Any:
        csrf = csrf_of(client.get("/login").text)
        return client.post(
            "/login", data={"token": token, "csrf": csrf, "next": "/"}, follow_redirects=False
        )

    assert login(TOKEN).status_code == 303
    cookie = client.cookies["awa_session"]
    assert client.get("/queues", follow_redirects=False).status_code == 200
    clock.now += 601
    assert client.get("/queues", follow_redirects=False).status_code == 303  # expired
    assert login(TOKEN).status_code == 303
    cookie = client.cookies["awa_session"]
    assert client.post("/logout", follow_redirects=False).status_code == 303
    client.cookies.set("awa_session", cookie)  # a copy kept from before logout
    assert client.get("/queues", follow_redirects=False).status_code == 303
    assert client.get("/api/stats").status_code == 401

    for _ in range(FREE_FAILURES):
        assert login("wrong").status_code == 401
    assert login("wrong").status_code == 401  # the sixth earns a wait
    slowed = login(TOKEN)
    assert slowed.status_code == 429 and slowed.headers["Retry-After"] == "1"
    assert "try again" in slowed.text
    api = client.get("/api/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    assert api.status_code == 429
    clock.now += 1
    assert login(TOKEN).status_code == 303
    # Wrong bearer tokens count as well.
    bearer = make_client(auth_token=TOKEN)
    for _ in range(FREE_FAILURES + 1):
        assert bearer.get("/api/stats", headers={"Authorization": "Bearer x"}).status_code == 401
    assert bearer.get("/api/stats", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429


def test_a_token_without_a_secret_guards_the_callback_routes(
    make_client: AppFactory, migrated_database_url: str
) -> None:
    client = make_client(auth_token=TOKEN)
    _job, cid = waiting_job(migrated_database_url)
    anonymous = client.post(f"/api/callbacks/{cid}/complete", json={})
    assert anonymous.status_code == 401 and "bearer" in anonymous.json()["error"]
    done = client.post(
        f"/api/callbacks/{cid}/complete",
        json={},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert done.status_code == 200 and done.json()["state"] == "completed"


def _signed(cid: str, action: str, body: bytes, stamp: int) -> dict[str, str]:
    return {
        TIMESTAMP_HEADER: str(stamp),
        REQUEST_SIGNATURE_HEADER: sign_callback_request(SECRET, cid, action, body, stamp),
        "Content-Type": "application/json",
    }


def test_request_signatures_cover_the_body_and_are_used_once(
    make_client: AppFactory, migrated_database_url: str
) -> None:
    client = make_client(callback_secret=SECRET)
    clock = clocked(client)
    now = int(clock.now)
    url = migrated_database_url
    _job, cid = waiting_job(url)
    beat = json.dumps({"timeout_seconds": 60}).encode()
    headers = _signed(cid, "heartbeat", beat, now)
    ok = client.post(f"/api/callbacks/{cid}/heartbeat", content=beat, headers=headers)
    assert ok.status_code == 200, ok.text
    replay = client.post(f"/api/callbacks/{cid}/heartbeat", content=beat, headers=headers)
    assert replay.status_code == 401 and "replay" in replay.json()["error"]
    # The heartbeat's signature does not carry over to /complete with another body.
    forged = json.dumps({"payload": {"forged": True}}).encode()
    moved = client.post(f"/api/callbacks/{cid}/complete", content=forged, headers=headers)
    assert moved.status_code == 401
    stale = _signed(cid, "complete", forged, now - 301)
    assert (
        client.post(f"/api/callbacks/{cid}/complete", content=forged, headers=stale).status_code
        == 401
    )
    half = {TIMESTAMP_HEADER: str(now)}
    assert client.post(f"/api/callbacks/{cid}/complete", json={}, headers=half).status_code == 401
    body = json.dumps({"payload": {"ok": True}}).encode()
    done = client.post(
        f"/api/callbacks/{cid}/complete", content=body, headers=_signed(cid, "complete", body, now)
    )
    assert done.status_code == 200 and done.json()["state"] == "completed"

    strict = make_client(callback_secret=SECRET, callback_require_request_signature=True)
    _job2, cid2 = waiting_job(url)
    id_only = strict.post(
        f"/api/callbacks/{cid2}/complete", json={}, headers={SIGNATURE_HEADER: sign(SECRET, cid2)}
    )
    assert id_only.status_code == 401 and REQUEST_SIGNATURE_HEADER in id_only.json()["error"]


def test_serve_options_and_start_warnings(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    serve_module = importlib.import_module("awa.entrypoints.cli.serve")
    monkeypatch.setattr(serve_module, "_run", lambda app, host, port: started.append(app))
    base = ["--database-url", migrated_database_url, "serve"]
    result = CliRunner().invoke(
        cli,
        [*base, "--auth-token", "t", "--session-ttl", "120", "--max-body-bytes", "4096"],
        env={"AWA_ALLOWED_HOSTS": "admin.example,ops.example x.test", "AWA_HOST": None},
    )
    assert result.exit_code == 0, result.stderr
    assert "callback routes want the bearer token" in result.stderr
    with TestClient(started[-1], base_url="http://admin.example") as client:
        web = client.app.state.awa  # type: ignore[attr-defined]
        assert web.config.allowed_hosts == ("admin.example", "ops.example", "x.test")
        assert (web.config.session_ttl, web.config.max_body_bytes) == (120.0, 4096)
    anything = CliRunner().invoke(cli, [*base, "--allowed-host", "*"], env={"AWA_UI_TOKEN": None})
    assert anything.exit_code == 0 and "DNS-rebinding" in anything.stderr
    bad = CliRunner().invoke(cli, [*base, "--allowed-host", "http://x/"])
    assert bad.exit_code == 2 and "--allowed-host" in bad.stderr
    lonely = CliRunner().invoke(
        cli, [*base, "--callback-require-request-signature"], env={"AWA_CALLBACK_HMAC_SECRET": None}
    )
    assert lonely.exit_code == 2 and "needs --callback-hmac-secret" in lonely.stderr
    defaults = CliRunner().invoke(cli, [*base], env={"AWA_HOST": None})
    assert defaults.exit_code == 0
    with TestClient(started[-1], base_url="http://localhost") as client:
        config = client.app.state.awa.config  # type: ignore[attr-defined]
        assert (config.max_body_bytes, config.session_ttl) == (2 * 1024 * 1024, 12 * 3600.0)
        assert config.allowed_hosts == ()


def test_a_real_server_answers_413_to_a_large_streamed_body(migrated_database_url: str) -> None:
    """Through uvicorn, a chunked body with no Content-Length: refused at the limit (the
    ASGI-level test in tests/unit shows reading stops there)."""
    config = ServerConfig(database_url=migrated_database_url, max_body_bytes=64 * 1024)
    with live_server(config) as base:
        host, port = base.removeprefix("http://").split(":")

        def body() -> Iterator[bytes]:
            for _ in range(320):  # 20 MiB
                yield b"x" * 65536

        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(
                "POST",
                "/api/queues/mail/pause",
                body=body(),
                headers={"Content-Type": "application/json"},
                encode_chunked=True,
            )
            response = conn.getresponse()
            assert response.status == 413
            assert "65536 bytes" in json.loads(response.read())["error"]
        finally:
            conn.close()
