"""Cron, batch operations and descriptors switch on as soon as the client has the methods
that ``awa.entrypoints.web.features`` names (here a client subclass provides them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import awa
from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.integration.web.conftest import Seeded

pytestmark = pytest.mark.postgres

SCHEDULE = {
    "name": "nightly",
    "cron_expr": "0 3 * * *",
    "timezone": "UTC",
    "kind": "report",
    "queue": "reports",
    "next_fire_at": "2099-01-01T03:00:00+00:00",
}
OP = {"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "op_kind": "set_priority", "state": "pending"}


class FeatureClient(awa.AsyncClient):
    calls: list[tuple[str, Any]] = []

    async def list_cron_jobs(self) -> list[dict[str, Any]]:
        return [SCHEDULE]

    async def trigger_cron_job(self, name: str) -> Any:
        self.calls.append(("trigger", name))
        return None if name != "nightly" else await self.insert({}, kind="report")

    async def pause_cron_job(self, name: str, paused_by: str | None = None) -> bool:
        self.calls.append(("pause", (name, paused_by)))
        return name == "nightly"

    async def resume_cron_job(self, name: str) -> bool:
        return name == "nightly"

    async def preview_batch_operation(self, op_kind: str, **kw: Any) -> dict[str, Any]:  # type: ignore[override]
        return {"total_matched": 3, "sample": []}

    async def submit_batch_operation(self, op_kind: str, **kw: Any) -> dict[str, Any]:  # type: ignore[override]
        self.calls.append(("submit", (op_kind, kw)))
        return OP

    async def list_batch_operations(self, **kw: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        return [OP]

    async def get_batch_operation(self, operation_id: str) -> dict[str, Any]:  # type: ignore[override]
        return OP

    async def cancel_batch_operation(self, operation_id: str) -> dict[str, Any]:  # type: ignore[override]
        return {**OP, "state": "cancelling"}

    async def list_queue_descriptors(self) -> list[dict[str, Any]]:
        return [{"queue": "mail", "display_name": "Outgoing mail", "owner": "growth"}]

    async def list_job_kind_descriptors(self) -> list[dict[str, Any]]:
        return [{"kind": "declared_only", "description": "not used yet"}]


@pytest.fixture
def api(seeded: Seeded) -> Iterator[TestClient]:
    FeatureClient.calls = []
    config = ServerConfig(database_url=seeded.url, cache_ttl=0.0)
    with TestClient(create_app(config, client_class=FeatureClient)) as client:
        yield client


def test_cron_endpoints(api: TestClient) -> None:
    assert api.get("/api/capabilities").json()["features"]["cron"] is True
    assert api.get("/api/cron").json() == [SCHEDULE]
    job = api.post("/api/cron/nightly/trigger").json()
    assert job["kind"] == "report" and job["state"] == "available"
    assert api.post("/api/cron/missing/trigger").status_code == 404
    assert api.post("/api/cron/nightly/pause", json={"paused_by": "ops"}).json() == {"ok": True}
    assert ("pause", ("nightly", "ops")) in FeatureClient.calls
    assert api.post("/api/cron/missing/resume").status_code == 404
    assert "nightly" in api.get("/cron").text


def test_batch_operation_endpoints(api: TestClient) -> None:
    body = {"op_kind": "set_priority", "spec": {"priority": 1}, "filter": {"queue": "mail"}}
    assert api.post("/api/batch-ops/preview", json=body).json()["total_matched"] == 3
    assert api.post("/api/batch-ops", json=body).json()["id"] == OP["id"]
    assert api.post("/api/batch-ops", json={"op_kind": "explode"}).status_code == 400
    assert api.get("/api/batch-ops").json() == [OP]
    assert api.get(f"/api/batch-ops/{OP['id']}").json() == OP
    assert api.patch(f"/api/batch-ops/{OP['id']}", json={"state": "running"}).status_code == 400
    cancelled = api.patch(f"/api/batch-ops/{OP['id']}", json={"state": "cancelling"}).json()
    assert cancelled["state"] == "cancelling"
    assert OP["id"] in api.get("/batch-ops").text


def test_descriptors_join_queues_kinds_and_jobs(api: TestClient, seeded: Seeded) -> None:
    queues = {q["queue"]: q for q in api.get("/api/queues").json()}
    assert queues["mail"]["descriptor"]["display_name"] == "Outgoing mail"
    kinds = {k["kind"]: k for k in api.get("/api/kinds").json()}
    assert kinds["declared_only"]["job_count"] == 0
    job = api.get("/api/jobs", params={"queue": "mail", "limit": 1}).json()[0]
    assert job["queue_descriptor"]["owner"] == "growth"
