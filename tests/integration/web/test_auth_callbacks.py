"""The auth token, CSRF on page forms, cross-site refusals and the callback receiver."""

from __future__ import annotations

import importlib
import re
import uuid
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import awa
from awa.callback_contract import SIGNATURE_HEADER, sign
from awa.entrypoints.cli import cli
from awa.entrypoints.web.app import ReadOnlyDatabase, create_callback_app
from awa.entrypoints.web.config import ServerConfig
from tests.integration.web.conftest import AppFactory, Seeded, set_state

pytestmark = pytest.mark.postgres

TOKEN = "s3cret-token"
SECRET = bytes(range(32))


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "page has no CSRF field"
    return match.group(1)


def test_api_needs_the_bearer_token(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url, auth_token=TOKEN)
    denied = client.get("/api/stats")
    assert denied.status_code == 401 and denied.json()["error"].startswith("authentication")
    assert client.get("/api/stats", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get("/api/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    assert client.get("/api/capabilities", headers={"Authorization": f"Bearer {TOKEN}"}).json()[
        "auth_required"
    ]


def test_pages_need_a_login(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url, auth_token=TOKEN)
    first = client.get("/queues", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/login")
    login = client.get("/login?next=/queues")
    csrf = csrf_of(login.text)
    wrong = client.post("/login", data={"token": "nope", "csrf": csrf, "next": "/queues"})
    assert wrong.status_code == 401
    right = client.post(
        "/login", data={"token": TOKEN, "csrf": csrf, "next": "/queues"}, follow_redirects=False
    )
    assert right.status_code == 303 and right.headers["location"] == "/queues"
    assert TOKEN not in right.headers["set-cookie"]
    assert client.get("/queues").status_code == 200
    # The session cookie works for the pages' own API calls, with the CSRF header for writes.
    assert client.get("/api/stats").status_code == 200
    assert client.post("/api/queues/mail/pause", json={}).status_code == 403
    headers = {"X-CSRF-Token": client.cookies["awa_csrf"]}
    assert client.post("/api/queues/mail/pause", json={}, headers=headers).status_code == 200


def test_page_forms_need_the_csrf_token(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url)
    failed = seeded.ids["failed"][0]
    page = client.get(f"/jobs/{failed}")
    forged = client.post(f"/jobs/{failed}/retry", data={"csrf": "forged"}, follow_redirects=False)
    assert forged.status_code == 303 and "CSRF" in forged.headers["location"]
    assert client.get(f"/api/jobs/{failed}").json()["job"]["state"] == "failed"
    done = client.post(
        f"/jobs/{failed}/retry", data={"csrf": csrf_of(page.text)}, follow_redirects=True
    )
    assert "Retried job" in done.text
    assert client.get(f"/api/jobs/{failed}").json()["job"]["state"] == "available"


def test_cross_site_mutations_are_refused(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url)
    evil = client.post(
        "/api/queues/mail/pause", json={}, headers={"Origin": "https://evil.example"}
    )
    assert evil.status_code == 403
    same = client.post(
        "/api/queues/mail/pause", json={}, headers={"Origin": "http://127.0.0.1:3000"}
    )
    assert same.status_code == 200


def waiting_job(url: str) -> tuple[int, str]:
    callback_id = str(uuid.uuid4())
    with awa.Client(url) as client:
        job_id = client.insert({"n": 1}, kind="hook", queue="hooks").id
    set_state(url, "waiting_external", [job_id])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.canonical_jobs SET callback_id = %s, run_lease = 1, "
            "callback_timeout_at = now() + interval '1 hour', attempted_at = now(), "
            "heartbeat_at = now() WHERE id = %s",
            (callback_id, job_id),
        )
    return job_id, callback_id


def _post(client: TestClient, cid: str, action: str, body: dict[str, Any], sig: str | None) -> Any:
    headers = {} if sig is None else {SIGNATURE_HEADER: sig}
    return client.post(f"/api/callbacks/{cid}/{action}", json=body, headers=headers)


def test_signed_callbacks(make_client: AppFactory, migrated_database_url: str) -> None:
    url = migrated_database_url
    client = make_client(url, callback_secret=SECRET, auth_token=TOKEN)
    job_id, cid = waiting_job(url)
    assert _post(client, cid, "complete", {}, None).status_code == 401
    assert _post(client, cid, "complete", {}, "0" * 64).status_code == 401
    wrong_id = sign(SECRET, str(uuid.uuid4()))
    assert _post(client, cid, "complete", {}, wrong_id).status_code == 401
    with awa.Client(url) as awa_client:
        assert str(awa_client.get_job(job_id).state) == "waiting_external"
    beat = _post(client, cid, "heartbeat", {"timeout_seconds": 60}, sign(SECRET, cid))
    assert beat.status_code == 200 and beat.json()["state"] == "waiting_external"
    done = _post(client, cid, "complete", {"payload": {"ok": True}}, sign(SECRET, cid))
    assert done.status_code == 200, done.text
    assert done.json() == {"id": job_id, "callback_id": cid, "state": "completed"}
    again = _post(client, cid, "complete", {}, sign(SECRET, cid))
    assert again.status_code == 404
    _job2, cid2 = waiting_job(url)
    failed = _post(client, cid2, "fail", {"error": "vendor said no"}, sign(SECRET, cid2))
    assert failed.json()["state"] in ("failed", "retryable")
    assert _post(client, cid2, "bogus", {}, sign(SECRET, cid2)).status_code == 404


def test_callback_receiver_only_serves_callbacks(migrated_database_url: str) -> None:
    config = ServerConfig(database_url=migrated_database_url, callback_prefix="/hooks")
    with TestClient(create_callback_app(config)) as client:
        _job_id, cid = waiting_job(migrated_database_url)
        assert client.get("/api/stats").status_code == 404
        assert client.get("/").status_code == 404
        assert client.post(f"/api/callbacks/{cid}/complete", json={}).status_code == 404
        done = client.post(f"/hooks/{cid}/complete", json={})
        assert done.json()["state"] == "completed"
        assert "access-control-allow-origin" not in done.headers


def test_callback_receiver_refuses_a_read_only_database(migrated_database_url: str) -> None:
    # By libpq's reading: a socket-directory URL keeps the host in its query.
    name = psycopg.conninfo.conninfo_to_dict(migrated_database_url)["dbname"]
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        config = ServerConfig(database_url=migrated_database_url, callback_secret=SECRET)
        with pytest.raises(ReadOnlyDatabase), TestClient(create_callback_app(config)):
            pass
        hex_secret = SECRET.hex()
        result = CliRunner().invoke(
            cli,
            [
                "--database-url",
                migrated_database_url,
                "callbacks",
                "serve",
                "--callback-hmac-secret",
                hex_secret,
            ],
        )
        assert result.exit_code == 1 and "writable database" in result.stderr
    finally:
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')


def test_callbacks_serve_refuses_to_start_without_a_secret(migrated_database_url: str) -> None:
    base = ["--database-url", migrated_database_url, "callbacks", "serve"]
    result = CliRunner().invoke(cli, base, env={"AWA_CALLBACK_HMAC_SECRET": None})
    assert result.exit_code == 2 and "--allow-unsigned" in result.stderr
    both = CliRunner().invoke(
        cli, [*base, "--allow-unsigned", "--callback-hmac-secret", SECRET.hex()]
    )
    assert both.exit_code == 2 and "mutually exclusive" in both.stderr
    short = CliRunner().invoke(cli, [*base, "--callback-hmac-secret", "abcd"])
    assert short.exit_code == 2 and "32 bytes" in short.stderr


def test_serve_validates_options_and_warns_on_open_bind(migrated_database_url: str) -> None:
    base = ["--database-url", migrated_database_url, "serve"]
    bad_color = CliRunner().invoke(cli, [*base, "--instance-color", "red"])
    assert bad_color.exit_code == 2 and "#rgb" in bad_color.stderr
    bad_peer = CliRunner().invoke(cli, [*base, "--peer", "x=ftp://host"])
    assert bad_peer.exit_code == 2 and "http" in bad_peer.stderr


def test_serve_reads_every_option_from_its_environment_variable(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_module = importlib.import_module("awa.entrypoints.cli.serve")

    started: list[tuple[Any, str, int]] = []
    monkeypatch.setattr(
        serve_module, "_run", lambda app, host, port: started.append((app, host, port))
    )
    env = {
        "AWA_HOST": "0.0.0.0",
        "AWA_PORT": "3123",
        "AWA_POOL_MAX": "7",
        "AWA_POOL_MIN": "1",
        "AWA_POOL_IDLE_TIMEOUT": "120",
        "AWA_POOL_MAX_LIFETIME": "900",
        "AWA_POOL_ACQUIRE_TIMEOUT": "3",
        "AWA_CACHE_TTL": "9",
        "AWA_READ_ONLY": "1",
        "AWA_CALLBACK_HMAC_SECRET": SECRET.hex(),
        "AWA_INSTANCE_NAME": "prod",
        "AWA_INSTANCE_COLOR": "#0af",
        "AWA_PEERS": "eu=https://eu.example.test us=https://us.example.test",
        "AWA_UI_TOKEN": None,
    }
    result = CliRunner().invoke(cli, ["--database-url", migrated_database_url, "serve"], env=env)
    assert result.exit_code == 0, result.stderr
    assert "without --auth-token" in result.stderr  # a non-loopback bind without a token
    ((app, host, port),) = started
    assert (host, port) == ("0.0.0.0", 3123)
    with TestClient(app, base_url="http://localhost:3123") as client:
        web = client.app.state.awa  # type: ignore[attr-defined]
        config = web.config
        assert config.read_only and config.cache_ttl == 9.0 and config.pool_max == 7
        assert config.callback_secret == SECRET and config.instance_color == "#0af"
        assert [p.name for p in config.peers] == ["eu", "us"]
        pool = client.portal.call(web.client._wiring).pool  # type: ignore[union-attr]
        assert pool is not None
        assert (pool.min_size, pool.max_size, pool.max_idle, pool.max_lifetime) == (
            1,
            7,
            120.0,
            900.0,
        )
        assert pool.timeout == 3.0
        assert client.get("/api/capabilities").json()["read_only"] is True
    quiet = CliRunner().invoke(
        cli,
        ["--database-url", migrated_database_url, "serve", "--auth-token", "t"],
        env={"AWA_HOST": "0.0.0.0"},
    )
    assert quiet.exit_code == 0 and "without --auth-token" not in quiet.stderr
    assert "callback routes want the bearer token" in quiet.stderr  # no callback secret
    default = CliRunner().invoke(
        cli, ["--database-url", migrated_database_url, "serve"], env={"AWA_HOST": None}
    )
    assert default.exit_code == 0 and "warning" not in default.stderr
    assert started[-1][1:] == ("127.0.0.1", 3000)
