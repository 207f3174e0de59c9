"""``awa serve`` on a streaming replica: every read works, the lag is shown, and a promotion
under the running server turns mutations back on.

The primary and the replica are real servers made by ``tests.support.replica``."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import awa
from awa.adapters._pg.migrations import migrate
from awa.entrypoints.web import state
from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.integration.web.conftest import seed
from tests.support.replica import ReplicaPair, ReplicaUnavailable, replica_pair

pytestmark = pytest.mark.postgres


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    try:
        with replica_pair() as made:
            yield made
    except ReplicaUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def always_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every request re-reads the replica's state instead of trusting a probe for 5 s.
    monkeypatch.setattr(state, "REPLICA_PROBE_MAX_AGE", 0.0)


def _app(url: str) -> TestClient:
    config = ServerConfig(database_url=url, cache_ttl=0.0)
    return TestClient(create_app(config), base_url="http://127.0.0.1:3000")


def _get_paths(client: TestClient) -> list[str]:
    paths: list[str] = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount) and route.path == "/api":
            paths += [
                "/api" + r.path
                for r in route.routes
                if isinstance(r, Route) and "GET" in (r.methods or ())
            ]
        elif isinstance(route, Route) and "GET" in (route.methods or ()) and route.path != "/login":
            paths.append(route.path)
    return paths


def test_every_read_is_served_from_a_replica_with_its_lag(
    pair: ReplicaPair, always_probe: None
) -> None:
    with psycopg.connect(pair.primary.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE app")
    primary_url, replica_url = pair.primary.url("app"), pair.replica.url("app")
    # As the suite's migrated template: the schema at its latest version, on the
    # canonical engine that ``seed`` writes states into.
    asyncio.run(migrate(primary_url))
    seeded = seed(primary_url)
    pair.wait_caught_up("app")

    with _app(replica_url) as client:
        caps = client.get("/api/capabilities").json()
        assert caps["read_only"] is True
        assert "replica" in caps["read_only_reason"]
        assert caps["replica"]["streaming"] is True
        assert caps["replica"]["behind_seconds"] == 0.0
        assert caps["replica"]["pending_bytes"] == 0

        values = {
            "job_id": str(seeded.ids["available"][0]),
            "queue": "mail",
            "name": "nightly",
            "instance_id": str(uuid.uuid4()),
            "operation_id": str(uuid.uuid4()),
            "batch_id": str(2**40),
        }
        # nothing seeded: 404, not 500
        unknown = {"name", "instance_id", "operation_id", "batch_id"}
        checked = 0
        for template in _get_paths(client):
            names = set(re.findall(r"{(\w+)}", template))
            path = template
            for name in names:
                path = path.replace("{" + name + "}", values[name])
            if template == "/dlq/{job_id}" or template == "/api/dlq/{job_id}":
                path = template.replace("{job_id}", str(seeded.ids["dlq"][0]))
            response = client.get(path)
            expected = 404 if names & unknown else 200
            assert response.status_code == expected, (template, response.text[:300])
            checked += 1
        assert checked >= 25

        jobs = client.get("/api/jobs", params={"limit": 100}).json()
        assert len(jobs) >= 11
        assert "replica: 0.0 s behind the primary" in client.get("/").text

        # Replay paused: the replica receives WAL it has not applied, and says so.
        with psycopg.connect(replica_url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        with awa.Client(primary_url) as producer:
            producer.insert({"n": 1}, kind="send_email", queue="mail")
        pair.wait_replay_behind("app")
        lagging = client.get("/api/capabilities").json()["replica"]
        assert lagging["pending_bytes"] > 0
        assert lagging["behind_seconds"] > 0
        assert "behind the primary" in lagging["summary"]
        with psycopg.connect(replica_url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")


def test_a_promoted_replica_turns_mutations_on_under_a_running_server(
    pair: ReplicaPair, always_probe: None, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(pair.primary.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE app")
    primary_url, replica_url = pair.primary.url("app"), pair.replica.url("app")
    # As the suite's migrated template: the schema at its latest version, on the
    # canonical engine that ``seed`` writes states into.
    asyncio.run(migrate(primary_url))
    seeded = seed(primary_url)
    pair.wait_caught_up("app")
    available = seeded.ids["available"][0]

    with _app(replica_url) as client:
        refused = client.post(f"/api/jobs/{available}/cancel")
        assert refused.status_code == 503
        assert "replica" in refused.json()["error"]

        pair.promote()
        with caplog.at_level(logging.WARNING, logger="awa.web"):
            caps = client.get("/api/capabilities").json()
        assert caps["read_only"] is False
        assert caps["replica"] is None
        assert any("accepts writes again" in r.getMessage() for r in caplog.records)

        done = client.post(f"/api/jobs/{available}/cancel")
        assert done.status_code == 200, done.text
    with awa.Client(replica_url) as promoted:
        assert promoted.get_job(available).state == awa.JobState.Cancelled
