"""Read-only mode: forced by configuration, or detected from the database."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from starlette.testclient import TestClient

from tests.integration.web.conftest import AppFactory, Seeded

pytestmark = pytest.mark.postgres

MUTATIONS: list[tuple[str, str, dict[str, object] | None]] = [
    ("POST", "/api/jobs/{failed}/retry", None),
    ("POST", "/api/jobs/{available}/cancel", None),
    ("POST", "/api/jobs/bulk-retry", {"ids": ["{failed}"]}),
    ("POST", "/api/queues/mail/pause", {}),
    ("POST", "/api/queues/mail/resume", None),
    ("POST", "/api/queues/mail/drain", None),
    ("POST", "/api/dlq/{dlq}/retry", {}),
    ("DELETE", "/api/dlq/{dlq}", None),
    ("POST", "/api/dlq/bulk-retry", {"all": True}),
    ("POST", f"/api/callbacks/{uuid.uuid4()}/complete", {}),
    ("POST", "/api/cron/nightly/trigger", None),
    ("POST", "/api/cron/nightly/pause", {}),
    ("POST", "/api/cron/nightly/resume", None),
    ("POST", "/api/batch-ops/preview", {"op_kind": "set_priority", "spec": {"priority": 1}}),
    ("POST", "/api/batch-ops", {"op_kind": "set_priority", "spec": {"priority": 1}}),
    ("PATCH", f"/api/batch-ops/{uuid.uuid4()}", {"state": "cancelling"}),
]


def assert_read_only(client: TestClient, seeded: Seeded, reason: str) -> None:
    ids = {k: v[0] for k, v in seeded.ids.items()}
    caps = client.get("/api/capabilities").json()
    assert caps["read_only"] is True and reason in caps["read_only_reason"]
    before = client.get("/api/stats").json()
    for method, path, body in MUTATIONS:
        payload: object = {"ids": [ids["failed"]]} if body and "ids" in body else body
        response = client.request(method, path.format(**ids), json=payload)
        assert response.status_code == 503, (path, response.text)
        assert "read-only" in response.json()["error"]
    assert client.get("/api/stats").json() == before
    assert client.get(f"/api/jobs/{ids['failed']}").json()["job"]["state"] == "failed"
    # Pages render no mutation buttons.
    for page in (f"/jobs/{ids['failed']}", "/queues", "/queues/mail", "/jobs", "/dlq"):
        html = client.get(page).text
        assert "read-only" in html
        assert 'method="post"' not in html.replace('action="/logout"', ""), page


def test_forced_read_only(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url, read_only=True)
    assert_read_only(client, seeded, "--read-only")


def test_writable_database_is_not_read_only(make_client: AppFactory, seeded: Seeded) -> None:
    client = make_client(seeded.url)
    assert client.get("/api/capabilities").json()["read_only"] is False
    assert 'action="/jobs/bulk"' in client.get("/jobs").text


def _database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def test_default_transaction_read_only_is_detected(make_client: AppFactory, seeded: Seeded) -> None:
    name = _database_name(seeded.url)
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        client = make_client(seeded.url)
        assert_read_only(client, seeded, "default_transaction_read_only")
    finally:
        with psycopg.connect(seeded.url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')


def test_role_without_write_grants_is_detected(make_client: AppFactory, seeded: Seeded) -> None:
    role = f"awa_viewer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA awa TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA awa TO {role}")
        conn.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA awa TO {role}")
    parts = urlsplit(seeded.url)
    host = parts.netloc.rsplit("@", 1)[-1]
    viewer_url = urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, ""))
    try:
        client = make_client(viewer_url)
        assert_read_only(client, seeded, "cannot insert, update and delete")
        assert client.get("/api/jobs").status_code == 200
    finally:
        # The app's pool still holds the role's sessions; end them before dropping it.
        with psycopg.connect(seeded.url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
