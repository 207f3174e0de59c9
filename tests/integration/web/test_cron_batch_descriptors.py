"""Cron schedules, batch operations and descriptors through ``awa serve``, against a real
Postgres and the real client: a runtime stores the schedule and the descriptors at
``start()``, the API and the pages read and act on them."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

import awa
from tests.integration.web.conftest import AppFactory, Seeded
from tests.integration.web.test_auth_callbacks import csrf_of

pytestmark = pytest.mark.postgres


@dataclasses.dataclass
class Report:
    day: str = "today"


async def _declare(url: str) -> None:
    """What a worker process does at start: store its schedule and descriptors."""
    async with awa.AsyncClient(url) as client:

        @client.task(Report, queue="reports")
        async def report(job: awa.Job[Report]) -> None:
            return None

        # Only ``reports``: the seeded jobs there are finished or far in the future, so
        # this short-lived runtime claims none of them.
        client.periodic("nightly", "0 3 * * *", Report, Report(), queue="reports")
        client.queue_descriptor("reports", display_name="Monthly reports", owner="finance")
        client.job_kind_descriptor("declared_only", description="not used yet")
        await client.start([("reports", 1)])
        await client.shutdown()


@pytest.fixture
def declared(seeded: Seeded) -> Seeded:
    asyncio.run(_declare(seeded.url))
    return seeded


@pytest.fixture
def api(make_client: AppFactory, declared: Seeded) -> TestClient:
    return make_client(declared.url)


def _future(text: str) -> bool:
    return datetime.fromisoformat(text) > datetime.now(UTC)


def test_capabilities_report_every_feature(api: TestClient) -> None:
    features = api.get("/api/capabilities").json()["features"]
    assert features == {
        "cron": True,
        "cron_control": True,
        "batch_operations": True,
        "descriptors": True,
    }


def test_cron_list_trigger_pause_resume(api: TestClient) -> None:
    (row,) = api.get("/api/cron").json()
    assert row["name"] == "nightly" and row["cron_expr"] == "0 3 * * *"
    assert row["kind"] == "report" and row["queue"] == "reports"
    assert row["next_fire_at"].endswith("T03:00:00Z") and _future(row["next_fire_at"])
    assert row["paused_at"] is None

    page = api.get("/cron").text
    assert "nightly" in page and "0 3 * * *" in page and 'action="/cron/nightly/pause"' in page

    paused = api.post("/api/cron/nightly/pause", json={"paused_by": "ops"})
    assert paused.status_code == 200 and paused.json() == {"ok": True}
    (row,) = api.get("/api/cron").json()
    assert row["paused_by"] == "ops" and row["paused_at"] is not None
    assert row["next_fire_at"] is None  # a paused schedule fires nothing
    page = api.get("/cron").text
    assert "paused" in page and 'action="/cron/nightly/resume"' in page

    triggered = api.post("/api/cron/nightly/trigger")  # fires even while paused
    assert triggered.status_code == 200
    job = triggered.json()
    assert job["kind"] == "report" and job["queue"] == "reports"
    assert job["state"] == "available" and job["args"] == {"day": "today"}
    assert job["metadata"]["cron_name"] == "nightly"
    assert api.get(f"/api/jobs/{job['id']}").status_code == 200

    assert api.post("/api/cron/nightly/resume").json() == {"ok": True}
    (row,) = api.get("/api/cron").json()
    assert row["paused_at"] is None and _future(row["next_fire_at"])

    for action in ("trigger", "pause", "resume"):
        missing = api.post(f"/api/cron/missing/{action}", json={})
        assert missing.status_code == 404, action
        assert missing.json() == {"error": "cron schedule not found: missing"}


def test_batch_operation_submit_list_get_cancel(api: TestClient, declared: Seeded) -> None:
    body = {"op_kind": "set_priority", "spec": {"priority": 1}, "filter": {"queue": "mail"}}
    preview = api.post("/api/batch-ops/preview", json=body).json()
    # Queued jobs in mail: the 3 available ones (running/finished ones are not targets).
    assert preview["total_matched"] == 3
    assert {j["id"] for j in preview["sample"]} == set(declared.ids["available"])

    submitted = api.post("/api/batch-ops", json={**body, "submitted_by": "ops"})
    assert submitted.status_code == 200
    op = submitted.json()
    assert op["op_kind"] == "set_priority" and op["state"] == "pending"
    assert op["submitted_by"] == "ops" and op["filter"]["queue"] == "mail"
    assert op["spec"]["priority"] == 1

    assert [o["id"] for o in api.get("/api/batch-ops").json()] == [op["id"]]
    assert [o["id"] for o in api.get("/api/batch-ops", params={"state": "pending"}).json()] == [
        op["id"]
    ]
    assert api.get("/api/batch-ops", params={"state": "completed"}).json() == []
    assert api.get("/api/batch-ops", params={"state": "bogus"}).status_code == 400
    assert api.get(f"/api/batch-ops/{op['id']}").json()["id"] == op["id"]
    assert op["id"] in api.get("/batch-ops").text

    unknown = uuid.uuid4()
    assert api.get(f"/api/batch-ops/{unknown}").status_code == 404
    bad = api.get("/api/batch-ops/not-a-uuid")
    assert bad.status_code == 400 and "invalid batch operation id" in bad.json()["error"]
    # Any spelling of a UUID names the same operation.
    assert api.get(f"/api/batch-ops/{op['id'].upper()}").json()["id"] == op["id"]
    assert api.patch(f"/api/batch-ops/{op['id']}", json={"state": "running"}).status_code == 400
    cancel = {"state": "cancelling"}
    assert api.patch(f"/api/batch-ops/{unknown}", json=cancel).status_code == 404
    cancelled = api.patch(f"/api/batch-ops/{op['id']}", json=cancel)
    assert cancelled.status_code == 200
    # A pending operation no runner has picked up ends cancelled at once or via cancelling.
    assert cancelled.json()["state"] in ("cancelling", "cancelled")
    stored = api.get(f"/api/batch-ops/{op['id']}").json()
    assert stored["state"] == cancelled.json()["state"]


def test_batch_operation_bad_input_is_400(api: TestClient) -> None:
    for body in (
        {"op_kind": "explode"},
        {"op_kind": "set_priority", "spec": {"priority": 9}, "filter": {"queue": "mail"}},
        {"op_kind": "set_priority", "spec": {"priority": 1}, "filter": {"colour": "red"}},
        {"op_kind": "set_priority", "spec": {"priority": 1}},  # no filter and no "all"
    ):
        response = api.post("/api/batch-ops", json=body)
        assert response.status_code == 400, body
        assert response.json()["error"]
    assert api.get("/api/batch-ops").json() == []


def test_descriptors_join_queues_kinds_and_jobs(api: TestClient) -> None:
    queues = {q["queue"]: q for q in api.get("/api/queues").json()}
    assert queues["reports"]["descriptor"]["display_name"] == "Monthly reports"
    assert queues["mail"]["descriptor"] is None
    kinds = {k["kind"]: k for k in api.get("/api/kinds").json()}
    assert kinds["declared_only"]["job_count"] == 0
    assert kinds["declared_only"]["descriptor"]["description"] == "not used yet"
    job = api.get("/api/jobs", params={"queue": "reports", "limit": 1}).json()[0]
    assert job["queue_descriptor"]["owner"] == "finance"
    assert "Monthly reports" in api.get("/queues").text
    assert "declared_only" in api.get("/kinds").text


def test_read_only_refuses_cron_and_batch_mutations(
    make_client: AppFactory, declared: Seeded
) -> None:
    writable = make_client(declared.url)
    body = {"op_kind": "set_priority", "spec": {"priority": 1}, "filter": {"queue": "mail"}}
    op = writable.post("/api/batch-ops", json=body).json()
    client = make_client(declared.url, read_only=True)
    before = (client.get("/api/cron").json(), client.get("/api/stats").json())
    for method, path, payload in [
        ("POST", "/api/cron/nightly/trigger", None),
        ("POST", "/api/cron/nightly/pause", {}),
        ("POST", "/api/cron/nightly/resume", None),
        ("POST", "/api/batch-ops/preview", body),
        ("POST", "/api/batch-ops", body),
        ("PATCH", f"/api/batch-ops/{op['id']}", {"state": "cancelling"}),
    ]:
        response = client.request(method, path, json=payload)
        assert response.status_code == 503, (path, response.text)
        assert "read-only" in response.json()["error"]
    assert (client.get("/api/cron").json(), client.get("/api/stats").json()) == before
    assert client.get(f"/api/batch-ops/{op['id']}").json()["state"] == "pending"
    assert len(client.get("/api/batch-ops").json()) == 1


def test_openapi_document_names_every_field_returned(api: TestClient) -> None:
    schemas = api.get("/api/openapi.json").json()["components"]["schemas"]
    (schedule,) = api.get("/api/cron").json()
    assert set(schedule) == set(schemas["CronSchedule"]["properties"])
    body = {"op_kind": "move_queue", "spec": {"queue": "elsewhere"}, "filter": {"kind": "report"}}
    preview = api.post("/api/batch-ops/preview", json=body).json()
    assert set(preview) == set(schemas["BatchPreview"]["properties"])
    op = api.post("/api/batch-ops", json=body).json()
    assert set(op) == set(schemas["BatchOperation"]["properties"])
    assert op["op_kind"] in schemas["BatchOperation"]["properties"]["op_kind"]["enum"]


def test_page_forms_pause_resume_trigger_and_submit(api: TestClient) -> None:
    csrf = csrf_of(api.get("/cron").text)
    paused = api.post("/cron/nightly/pause", data={"csrf": csrf}, follow_redirects=True)
    assert paused.status_code == 200 and 'action="/cron/nightly/resume"' in paused.text
    assert api.get("/api/cron").json()[0]["paused_at"] is not None
    api.post("/cron/nightly/trigger", data={"csrf": csrf}, follow_redirects=True)
    assert api.get("/api/stats").json()["available"] == 4  # 3 seeded + the triggered one
    api.post("/cron/nightly/resume", data={"csrf": csrf}, follow_redirects=True)
    assert api.get("/api/cron").json()[0]["paused_at"] is None

    form = {"csrf": csrf, "op_kind": "set_priority", "priority": "1", "queue": "mail"}
    preview = api.post("/batch-ops", data={**form, "preview": "1"}, follow_redirects=True)
    assert "3 jobs match" in preview.text and api.get("/api/batch-ops").json() == []
    submitted = api.post("/batch-ops", data=form, follow_redirects=True)
    (op,) = api.get("/api/batch-ops").json()
    assert f"Submitted batch operation {op['id']}" in submitted.text
    cancel = api.post(f"/batch-ops/{op['id']}/cancel", data={"csrf": csrf}, follow_redirects=True)
    assert f"Cancelling batch operation {op['id']}" in cancel.text
    assert api.get(f"/api/batch-ops/{op['id']}").json()["state"] in ("cancelling", "cancelled")
