"""The REST API against a real, seeded database."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from starlette.testclient import TestClient

from tests.integration.web.conftest import AppFactory, Seeded, set_state

pytestmark = pytest.mark.postgres


def db_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
    return {state: n for state, n in rows}


def test_stats_equal_the_database_grouped_by_state(api: TestClient, seeded: Seeded) -> None:
    stats = api.get("/api/stats").json()
    expected = db_counts(seeded.url)
    # The dead-lettered job counts as failed, as awa-cli counts it.
    expected["failed"] += len(seeded.ids["dlq"])
    assert {k: v for k, v in stats.items() if v} == expected
    assert set(stats) >= {"available", "running", "failed", "completed", "waiting_external"}


def test_jobs_filters_and_cursor(api: TestClient, seeded: Seeded) -> None:
    failed = api.get("/api/jobs", params={"state": "failed"}).json()
    assert sorted(j["id"] for j in failed) == sorted(seeded.ids["failed"])
    assert all(j["original_priority"] == j["priority"] for j in failed)
    vip = api.get("/api/jobs", params={"tag": "vip"}).json()
    assert sorted(j["id"] for j in vip) == sorted(seeded.ids["available"])
    page1 = api.get("/api/jobs", params={"limit": 4}).json()
    page2 = api.get("/api/jobs", params={"limit": 4, "before_id": page1[-1]["id"]}).json()
    assert len(page1) == 4 and page2
    assert not {j["id"] for j in page1} & {j["id"] for j in page2}
    assert max(j["id"] for j in page2) < min(j["id"] for j in page1)
    bad = api.get("/api/jobs", params={"state": "bogus"})
    assert bad.status_code == 400 and "unknown state" in bad.json()["error"]
    assert api.get("/api/jobs", params={"limit": "x"}).status_code == 400


def test_job_detail_404_and_dlq_block(api: TestClient, seeded: Seeded) -> None:
    doc = api.get(f"/api/jobs/{seeded.ids['failed'][0]}").json()
    assert doc["job"]["state"] == "failed" and doc["summary"]["can_retry"]
    assert doc["timeline"][0]["label"] == "Created"
    assert api.get("/api/jobs/987654").status_code == 404
    assert api.get("/api/jobs/987654").json() == {"error": "job not found: 987654"}
    dlq = api.get(f"/api/jobs/{seeded.ids['dlq'][0]}").json()
    assert dlq["dlq"]["reason"] == "manual"


def test_retry_cancel_and_bulk(api: TestClient, seeded: Seeded) -> None:
    failed = seeded.ids["failed"][0]
    retried = api.post(f"/api/jobs/{failed}/retry").json()
    assert retried["state"] == "available" and retried["attempt"] == 0
    # Already runnable: nothing to do, answered with null.
    assert api.post(f"/api/jobs/{failed}/retry").json() is None
    assert api.post("/api/jobs/987654/retry").status_code == 404
    # A running attempt is left alone; a job waiting for a callback is retried as
    # `awa job retry` does (the callback ends, the job is available now).
    assert api.post(f"/api/jobs/{seeded.ids['running'][0]}/retry").json() is None
    waiting = seeded.ids["scheduled"][0]
    set_state(seeded.url, "waiting_external", [waiting])
    assert api.post(f"/api/jobs/{waiting}/retry").json()["state"] == "available"
    cancelled = api.post(f"/api/jobs/{seeded.ids['available'][0]}/cancel").json()
    assert cancelled["state"] == "cancelled"
    assert api.post(f"/api/jobs/{seeded.ids['completed'][0]}/cancel").json() is None
    pair = seeded.ids["available"][1:3]
    both = api.post("/api/jobs/bulk-cancel", json={"ids": pair}).json()
    assert sorted(j["id"] for j in both) == sorted(pair)
    assert {j["state"] for j in both} == {"cancelled"}
    again = api.post("/api/jobs/bulk-retry", json={"ids": pair}).json()
    assert {j["state"] for j in again} == {"available"}
    assert api.post("/api/jobs/bulk-retry", json={"ids": "x"}).status_code == 400


def test_queues_pause_resume_drain(api: TestClient, seeded: Seeded) -> None:
    queues = {q["queue"]: q for q in api.get("/api/queues").json()}
    assert queues["mail"]["available"] == 3 and queues["mail"]["dlq_depth"] == 1
    assert queues["reports"]["failed"] == 2
    assert api.get("/api/queues/nope").status_code == 404
    assert api.post("/api/queues/mail/pause").status_code == 400  # body required
    assert api.post("/api/queues/mail/pause", json={}).json() == {"ok": True}
    assert api.get("/api/queues/mail").json()["paused"] is True
    assert api.post("/api/queues/mail/resume").json() == {"ok": True}
    assert api.get("/api/queues/mail").json()["paused"] is False
    assert api.post("/api/queues/mail/drain").json() == {"drained": 3}
    assert api.get("/api/stats/queues").json() == ["mail", "reports"]


def test_kinds_and_timeseries(api: TestClient, seeded: Seeded) -> None:
    kinds = {k["kind"]: k for k in api.get("/api/kinds").json()}
    # The dead-lettered send_email job counts, as awa-cli counts it.
    assert kinds["report"]["job_count"] == 5 and kinds["send_email"]["job_count"] == 7
    assert api.get("/api/stats/kinds").json() == ["report", "send_email"]
    series = api.get("/api/stats/timeseries", params={"minutes": 60}).json()
    per_state: Counter[str] = Counter()
    for row in series:
        per_state[row["state"]] += row["count"]
    assert per_state == {"completed": 2, "failed": 2, "cancelled": 1}
    assert api.get("/api/stats/timeseries", params={"minutes": 0}).status_code == 400


def test_dlq_endpoints(api: TestClient, seeded: Seeded) -> None:
    dead = seeded.ids["dlq"][0]
    rows = api.get("/api/dlq").json()
    assert [r["job"]["id"] for r in rows] == [dead]
    assert api.get("/api/dlq/depth").json() == {
        "total": 1,
        "by_queue": [{"queue": "mail", "count": 1}],
    }
    assert api.get(f"/api/dlq/{dead}").json()["reason"] == "manual"
    assert api.get("/api/dlq/987654").json() is None
    assert api.post("/api/dlq/bulk-retry", json={}).status_code == 400
    moved = api.post("/api/dlq/bulk-move", json={"queue": "reports"}).json()
    assert moved == {"count": 2}
    job = api.post(f"/api/dlq/{dead}/retry", json={"queue": "elsewhere"}).json()
    assert job["queue"] == "elsewhere" and job["state"] == "available"
    assert api.delete(f"/api/dlq/{seeded.ids['failed'][0]}").json() == {"count": 1}
    assert api.post("/api/dlq/bulk-purge", json={"all": True}).json() == {"count": 1}


def test_capabilities_identity_and_storage(make_client: AppFactory) -> None:
    from awa.entrypoints.web.config import Peer

    client = make_client(
        instance_name="prod-eu",
        instance_color="#ff8800",
        peers=(Peer("us", "https://us.example.test"),),
        cache_ttl=10.0,
    )
    caps = client.get("/api/capabilities").json()
    assert caps["instance_name"] == "prod-eu" and caps["instance_color"] == "#ff8800"
    assert caps["peers"] == [{"name": "us", "url": "https://us.example.test"}]
    assert caps["poll_interval_ms"] == 10000 and caps["read_only"] is False
    storage = client.get("/api/storage", params={"history": "true"}).json()
    assert storage["state"] == "canonical" and storage["history"] == []
    assert storage["can_finalize"] is False
    assert storage["finalize_blockers"] == [
        "finalize needs state mixed_transition, the cluster is canonical"
    ]
    assert client.get("/api/runtime").json()["total"] == 0
    assert client.get("/api/openapi.json").json()["openapi"].startswith("3.")


def test_reads_are_cached_for_the_ttl_and_dropped_by_mutations(
    make_client: AppFactory, seeded: Seeded
) -> None:
    client = make_client(seeded.url, cache_ttl=60.0)
    cache = client.app.state.awa.cache  # type: ignore[attr-defined]
    first = client.get("/api/stats").json()
    loads = cache.loads
    with psycopg.connect(seeded.url, autocommit=True) as conn:
        conn.execute("DELETE FROM awa.canonical_jobs WHERE state = 'completed'")
    assert client.get("/api/stats").json() == first
    assert cache.loads == loads
    client.post("/api/queues/mail/pause", json={})
    assert client.get("/api/stats").json()["completed"] == 0


def test_an_unmigrated_database_answers_503_naming_the_fix(
    make_client: AppFactory, database_url: str
) -> None:
    client = make_client(database_url)
    response = client.get("/api/stats")
    assert response.status_code == 503 and "awa migrate" in response.json()["error"]
    page = client.get("/")
    assert page.status_code == 503 and "awa migrate" in page.text
