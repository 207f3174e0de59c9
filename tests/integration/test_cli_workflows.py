"""``awa job get`` (a job's parents, children and stored result) and ``awa queue keys``
(a queue's concurrency keys and its limits) against a real, migrated database."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from awa.entrypoints.cli import cli
from tests.fixtures.workflow_seed import KEYED, seed_workflow

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(migrated_database_url: str) -> Iterator[str]:
    yield migrated_database_url


def awa_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def test_job_get_shows_parents_children_and_result(url: str) -> None:
    ids = seed_workflow(url)
    shown = awa_cli(url, "job", "get", str(ids["report"]))
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:8] == [
        "Job",
        str(ids["report"]),
        "kind",
        "wf_step",
        "queue",
        "wf_hold",
        "state",
        "scheduled",
    ]
    assert "Waiting on 1 of 2 parent(s)" in lines
    parents = lines.index("Parents (2):")
    assert lines[parents + 1].split() == ["ID", "KIND", "STATE", "EDGE"]
    assert lines[parents + 2].split() == [str(ids["extract"]), "wf_step", "completed", "met"]
    assert lines[parents + 3].split() == [str(ids["load"]), "wf_step", "available", "waiting"]
    children = lines.index("Children (1):")
    assert lines[children + 2].split() == [str(ids["notify"]), "wf_step", "scheduled", "waiting"]
    assert lines[-1] == "Result: no result stored"

    done = awa_cli(url, "job", "get", str(ids["extract"]))
    assert "Parents: none" in done.stdout.splitlines()
    assert "Result (stored " in done.stdout
    assert '"rows": 42' in done.stdout

    cancelled = json.loads(awa_cli(url, "job", "get", str(ids["cleanup"]), "--json").stdout)
    assert cancelled["job"]["state"] == cancelled["state"] == "cancelled"
    (parent,) = cancelled["parents"]
    assert (parent["id"], parent["state"], parent["failed"]) == (ids["broken"], "failed", True)
    assert cancelled["result"] == {"stored": False}

    stored = json.loads(awa_cli(url, "--json", "job", "get", str(ids["extract"])).stdout)
    assert stored["result"]["stored"] is True
    assert stored["result"]["value"] == {"rows": 42, "step": "extract"}
    assert [c["id"] for c in stored["children"]] == [ids["report"]]
    assert stored["child_count"] == 1 and stored["waiting_on"] == 0


def test_job_get_shows_a_batch_s_progress(url: str) -> None:
    ids = seed_workflow(url)
    shown = awa_cli(url, "job", "get", str(ids["batch"]))
    assert shown.exit_code == 0, shown.stderr
    assert (
        "Batch callback of 3 job(s): 1 completed, 1 failed, 0 cancelled, 1 pending"
        in shown.stdout.splitlines()
    )
    doc = json.loads(awa_cli(url, "job", "get", str(ids["batch"]), "--json").stdout)
    assert doc["batch"] == {"size": 3, "completed": 1, "failed": 1, "cancelled": 0, "pending": 1}
    member = json.loads(awa_cli(url, "job", "get", str(ids["batch_held"]), "--json").stdout)
    assert member["batch"] is None
    assert [c["id"] for c in member["children"]] == [ids["batch"]]


def test_job_get_of_an_unknown_job_is_one_line_exit_1(url: str) -> None:
    missing = awa_cli(url, "job", "get", "987654321")
    assert missing.exit_code == 1
    assert missing.stderr.splitlines()[-1] == "awa: error: job 987654321 not found"
    assert awa_cli(url, "job", "get", "x").exit_code == 2


def test_queue_keys_lists_running_and_waiting_per_key(url: str) -> None:
    seed_workflow(url)
    shown = awa_cli(url, "queue", "keys", KEYED)
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:2] == [
        f"Queue {KEYED}: per-key limit 1 (override)",
        "  fleet-wide rate limit: 5/s, burst 10 (override)",
    ]
    assert [line.split() for line in lines[2:]] == [
        ["KEY", "RUNNING", "WAITING"],
        ["tenant-a", "1", "2"],
        ["tenant-b", "0", "1"],
    ]
    doc = json.loads(awa_cli(url, "queue", "keys", KEYED, "--limit", "1", "--json").stdout)
    assert doc == {
        "queue": KEYED,
        "limits": {
            "max_running_per_key": 1,
            "rate_limit_per_second": None,
            "rate_limit_burst": None,
            "global_rate_per_second": 5.0,
            "global_rate_burst": 10,
            "global_rate_per_key_per_second": None,
            "global_rate_per_key_burst": None,
        },
        "keys": [{"key": "tenant-a", "running": 1, "waiting": 2}],
    }
    empty = awa_cli(url, "queue", "keys", "no_such_queue")
    assert empty.stdout.splitlines()[-1] == "No concurrency key has a running or waiting job."
    assert awa_cli(url, "queue", "keys", KEYED, "--limit", "0").exit_code == 2
