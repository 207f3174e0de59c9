"""The admin API's workflow and key reads against a real database: a job's parents,
children and stored result, the workflow graph around it, a queue's keys with how many
run and wait on each; bad ids and limits answer 4xx with a JSON body."""

from __future__ import annotations

import pytest

from tests.fixtures.workflow_seed import KEYED, seed_workflow
from tests.integration.web.conftest import AppFactory

pytestmark = pytest.mark.postgres


def test_relations_graph_and_keys(make_client: AppFactory, migrated_database_url: str) -> None:
    ids = seed_workflow(migrated_database_url)
    api = make_client()

    report = api.get(f"/api/jobs/{ids['report']}/relations").json()
    assert (report["state"], report["waiting_on"], report["parent_count"]) == ("scheduled", 1, 2)
    assert [(p["id"], p["state"], p["satisfied_at"] is not None) for p in report["parents"]] == [
        (ids["extract"], "completed", True),
        (ids["load"], "available", False),
    ]
    assert [(c["id"], c["state"]) for c in report["children"]] == [(ids["notify"], "scheduled")]
    assert report["result"] == {"stored": False}

    assert report["batch"] is None
    batch = api.get(f"/api/jobs/{ids['batch']}/relations").json()
    assert batch["batch"] == {"size": 3, "completed": 1, "failed": 1, "cancelled": 0, "pending": 1}
    assert batch["parent_count"] == 3 and batch["state"] == "scheduled"

    progress = api.get(f"/api/batches/{ids['batch']}")
    assert progress.status_code == 200
    assert progress.json() == {
        "batch_id": ids["batch"],
        "callback_state": "scheduled",
        "size": 3,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
        "pending": 1,
        "finished": False,
    }
    for wrong in (ids["batch_held"], 987654321):
        missing = api.get(f"/api/batches/{wrong}")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": f"batch not found: {wrong} (a batch's id is its callback job's id)"
        }
    assert api.get("/api/batches/x").status_code == 400

    extract = api.get(f"/api/jobs/{ids['extract']}/relations").json()
    assert extract["result"]["stored"] is True
    assert extract["result"]["value"] == {"rows": 42, "step": "extract"}

    graph = api.get(f"/api/jobs/{ids['notify']}/graph").json()
    assert graph["truncated"] is False
    states = {n["id"]: (n["state"], n["depth"]) for n in graph["nodes"]}
    assert states == {
        ids["extract"]: ("completed", 0),
        ids["load"]: ("available", 0),
        ids["report"]: ("scheduled", 1),
        ids["notify"]: ("scheduled", 2),
    }
    assert sorted(map(tuple, graph["edges"])) == sorted(
        [
            (ids["extract"], ids["report"]),
            (ids["load"], ids["report"]),
            (ids["report"], ids["notify"]),
        ]
    )
    failed = api.get(f"/api/jobs/{ids['cleanup']}/graph").json()
    assert {n["id"]: n["state"] for n in failed["nodes"]} == {
        ids["broken"]: "failed",
        ids["cleanup"]: "cancelled",
    }

    keys = api.get(f"/api/queues/{KEYED}/keys").json()
    assert keys["limits"]["max_running_per_key"] == 1
    assert (keys["limits"]["global_rate_per_second"], keys["limits"]["global_rate_burst"]) == (
        5.0,
        10,
    )
    assert keys["limit_sources"]["max_running_per_key"] == "override"
    assert keys["limit_sources"]["rate_limit_per_second"] is None
    # tenant-a's one running attempt fills its one slot: both waiting jobs are held back.
    assert keys["keys"] == [
        {"key": "tenant-a", "running": 1, "waiting": 2, "held_back": 2},
        {"key": "tenant-b", "running": 0, "waiting": 1, "held_back": 0},
    ]
    top = api.get(f"/api/queues/{KEYED}/keys", params={"limit": 1}).json()
    assert [k["key"] for k in top["keys"]] == ["tenant-a"]


def test_a_held_back_job_says_why(make_client: AppFactory, migrated_database_url: str) -> None:
    ids = seed_workflow(migrated_database_url)
    api = make_client()
    reason = "held back: key tenant-a has 1 of 1 running (max_running_per_key)"
    job = api.get(f"/api/jobs/{ids['keyed_held']}").json()
    assert job["held_back"] == {
        "limit": "max_running_per_key",
        "key": "tenant-a",
        "running": 1,
        "max_running": 1,
        "next_admission": None,
        "reason": reason,
    }
    assert job["job"]["held_back"] == job["held_back"]
    assert api.get(f"/api/jobs/{ids['keyed_free']}").json()["held_back"] is None
    rows = api.get("/api/jobs", params={"queue": KEYED}).json()
    held = {row["id"]: row["held_back"] for row in rows}
    assert held[ids["keyed_held"]]["reason"] == reason
    assert held[ids["keyed_free"]] is None and held[ids["keyed_running"]] is None
    schema = api.get("/api/openapi.json").json()["components"]["schemas"]["Job"]
    assert "held_back" in schema["properties"]


def test_bad_ids_and_limits_answer_json_errors(make_client: AppFactory) -> None:
    api = make_client()
    for path in ("/api/jobs/987654321/relations", "/api/jobs/987654321/graph"):
        missing = api.get(path)
        assert missing.status_code == 404
        assert missing.json() == {"error": "job not found: 987654321"}
    bad = api.get("/api/jobs/abc/graph")
    assert bad.status_code in (400, 404) and "error" in bad.json()
    for limit in ("0", "1001", "x"):
        refused = api.get(f"/api/queues/{KEYED}/keys", params={"limit": limit})
        assert refused.status_code == 400, limit
        assert "limit" in refused.json()["error"]
    assert api.get("/api/jobs/987654321").status_code == 404
    assert "/api/queues/{queue}/keys" in api.get("/api/openapi.json").json()["paths"]
