"""The admin server's defences that need no database: Host policy, body limit, security
headers, sessions, the login throttle, request signatures and safe links."""

from __future__ import annotations

import json
from typing import Any

import pytest

from awa.callback_contract import (
    sign_callback,
    sign_callback_request,
    verify_callback,
    verify_callback_request,
)
from awa.entrypoints.web.guard import (
    GuardMiddleware,
    HostPolicy,
    host_name,
    parse_allowed_hosts,
)
from awa.entrypoints.web.render import environment, web_link
from awa.entrypoints.web.sessions import (
    FREE_FAILURES,
    MAX_WAIT_SECS,
    LoginThrottle,
    SeenSignatures,
    SessionStore,
)

pytestmark = pytest.mark.anyio
SECRET = bytes(range(32))


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:3000", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("Admin.Example.COM.", "admin.example.com"),
        ("::1", "::1"),
    ],
)
def test_host_name_drops_port_and_case(header: str, name: str) -> None:
    assert host_name(header) == name


def test_host_policy_serves_loopback_and_named_hosts_only() -> None:
    policy = HostPolicy(
        parse_allowed_hosts(["admin.example, ops.example", "x.test:443"]), enforce=True
    )
    assert policy.allowed == {"admin.example", "ops.example", "x.test"}
    for ok in (
        "localhost",
        "localhost:3000",
        "127.0.0.1:3000",
        "127.1.2.3",
        "[::1]:1",
        "admin.example:8443",
    ):
        assert policy.accepts(ok), ok
    for bad in ("evil.example", "rebind.localhost.evil", "10.0.0.1:3000", "", None, "[::2]"):
        assert not policy.accepts(bad), bad
    assert HostPolicy((), enforce=False).accepts("evil.example")
    assert HostPolicy(parse_allowed_hosts(["*"]), enforce=True).accepts("evil.example")
    with pytest.raises(ValueError, match="allowed-host"):
        parse_allowed_hosts(["http://x/"])
    with pytest.raises(ValueError, match="allowed-host"):
        parse_allowed_hosts(["*.example"])


class Inner:
    """An app that reads its whole body, counting what it got, then answers 200."""

    def __init__(self) -> None:
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            self.read += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(
    app: Any, headers: dict[str, str], chunks: list[bytes]
) -> tuple[int, dict[str, str], bytes, int]:
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        body = chunks[pulled - 1] if pulled <= len(chunks) else b""
        return {"type": "http.request", "body": body, "more_body": pulled < len(chunks)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/x",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    await app(scope, receive, send)
    start = sent[0]
    got = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], got, b"".join(m.get("body", b"") for m in sent[1:]), pulled


async def test_a_streamed_body_stops_being_read_at_the_limit() -> None:
    inner = Inner()
    app = GuardMiddleware(inner, hosts=HostPolicy((), enforce=True), max_body_bytes=1000)
    chunks = [b"x" * 400] * 100  # 40 kB, no Content-Length (chunked)
    status, headers, body, pulled = await call(app, {"host": "localhost"}, chunks)
    assert status == 413 and "1000 bytes" in json.loads(body)["error"]
    assert pulled == 3 and inner.read == 800  # the third chunk passed the limit
    assert headers["x-content-type-options"] == "nosniff"
    status, _, body, pulled = await call(
        app, {"host": "localhost", "content-length": "1001"}, chunks
    )
    assert status == 413 and pulled == 0  # refused before reading anything
    inner.read = 0
    status, headers, body, _ = await call(app, {"host": "localhost"}, [b"y" * 500, b"y" * 500])
    assert (status, body, inner.read) == (200, b"ok", 1000)
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    status, headers, body, pulled = await call(app, {"host": "evil.example:3000"}, [b""])
    assert status == 400 and "evil.example" in json.loads(body)["error"] and pulled == 0
    assert headers["content-type"] == "application/json" and "x-frame-options" in headers


def test_sessions_are_signed_expire_and_end_at_logout() -> None:
    store = SessionStore("token", ttl=100.0)
    cookie = store.issue(now=1000.0)
    assert store.valid(cookie, 1000.0) and store.valid(cookie, 1099.0)
    assert not store.valid(cookie, 1100.0)  # expired
    session_id, expires, mac = cookie.split(".")
    assert not store.valid(f"{session_id}.{int(expires) + 1000}.{mac}", 1000.0)  # tampered
    assert not store.valid(f"{session_id}.{expires}.{mac[:-1]}é", 1000.0)
    assert not store.valid("garbage", 1000.0) and not store.valid("a.b.c", 1000.0)
    # Another process (or a restart) with the same token does not accept it.
    assert not SessionStore("token", ttl=100.0).valid(cookie, 1000.0)
    other = store.issue(now=1000.0)
    assert store.revoke(cookie, 1001.0) and not store.valid(cookie, 1001.0)
    assert store.valid(other, 1001.0)
    assert not store.revoke(cookie, 1002.0)


def test_the_throttle_doubles_the_wait_after_five_failures() -> None:
    throttle = LoginThrottle()
    now = 0.0
    for _ in range(FREE_FAILURES):
        assert throttle.failed("1.2.3.4", now) == 0.0
        assert throttle.wait("1.2.3.4", now) == 0.0
    assert throttle.failed("1.2.3.4", now) == 1.0
    assert throttle.wait("1.2.3.4", now) == 1.0 and throttle.wait("5.6.7.8", now) == 0.0
    now = 1.0
    assert throttle.failed("1.2.3.4", now) == 2.0
    now = 3.0
    assert throttle.failed("1.2.3.4", now) == 4.0
    for _ in range(40):
        throttle.failed("1.2.3.4", now)
    assert throttle.wait("1.2.3.4", now) == MAX_WAIT_SECS
    throttle.succeeded("1.2.3.4")
    assert throttle.wait("1.2.3.4", now) == 0.0


def test_request_signatures_cover_body_action_and_time() -> None:
    body = b'{"payload":{"ok":true}}'
    sig = sign_callback_request(SECRET, "cb-1", "complete", body, 1_000)
    ok = {"now": 1_100.0, "window": 300.0}
    assert verify_callback_request(SECRET, "cb-1", "complete", body, "1000", sig, **ok)
    assert not verify_callback_request(SECRET, "cb-1", "complete", b"{}", "1000", sig, **ok)
    assert not verify_callback_request(SECRET, "cb-1", "fail", body, "1000", sig, **ok)
    assert not verify_callback_request(SECRET, "cb-2", "complete", body, "1000", sig, **ok)
    assert not verify_callback_request(SECRET, "cb-1", "complete", body, "1001", sig, **ok)
    assert not verify_callback_request(SECRET, "cb-1", "complete", body, "x", sig, **ok)
    late = {"now": 1_301.0, "window": 300.0}
    assert not verify_callback_request(SECRET, "cb-1", "complete", body, "1000", sig, **late)
    # Never equal to the id-only signature of anything it covers.
    assert sig != sign_callback(SECRET, "cb-1")
    assert not verify_callback_request(SECRET, "cb-1", "complete", body, "1000", "é" * 64, **ok)
    with pytest.raises(TypeError):
        sign_callback_request(SECRET, "cb-1", "complete", body, True)


def test_a_non_ascii_signature_is_a_wrong_one_not_an_error() -> None:
    assert not verify_callback(SECRET, "cb-1", "ü" * 64)
    assert verify_callback(SECRET, "cb-1", sign_callback(SECRET, "cb-1").upper())


def test_each_request_signature_is_accepted_once_within_its_window() -> None:
    seen = SeenSignatures()
    assert seen.first_use("AB", forget_at=10.0, now=0.0)
    assert not seen.first_use("ab", forget_at=10.0, now=5.0)
    assert seen.first_use("cd", forget_at=20.0, now=5.0)
    assert seen.first_use("ab", forget_at=30.0, now=11.0)  # forgotten once out of window


@pytest.mark.parametrize(
    ("value", "link"),
    [
        ("https://docs.example/q", "https://docs.example/q"),
        ("http://x.test", "http://x.test"),
        ("javascript:alert(1)", None),
        (" JavaScript:alert(1)", None),
        ("data:text/html,<script>", None),
        ("//evil.example/x", None),
        ("/relative", None),
        ("https:///nohost", None),
        (None, None),
    ],
)
def test_only_http_links_are_links(value: Any, link: str | None) -> None:
    assert web_link(value) == link


def test_a_javascript_docs_url_renders_as_text() -> None:
    macros = environment().get_template("_macros.html").module
    html = str(macros.descriptor({"docs_url": "javascript:alert(document.cookie)"}))  # type: ignore[attr-defined]
    assert "<a " not in html and "javascript:alert(document.cookie)" in html
    good = str(macros.descriptor({"docs_url": "https://docs.example/q"}))  # type: ignore[attr-defined]
    assert '<a href="https://docs.example/q"' in good
