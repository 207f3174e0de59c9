"""``awa job get`` (a job's parents, children and stored result) and ``awa queue keys``
(a queue's concurrency keys and its limits) against a real, migrated database."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner, Result

import awa
from awa.adapters._pg.pool import open_pool
from awa.adapters._pg.runtime_registry import PostgresRuntimeRegistry
from awa.entrypoints.cli import cli
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot
from tests.fixtures.workflow_seed import KEYED, seed_workflow

pytestmark = pytest.mark.postgres

#: A queue the seeded workflow leaves alone.
OTHER = "keyed_by_workers"


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


def test_batch_show_prints_a_batch_s_progress(url: str) -> None:
    ids = seed_workflow(url)
    shown = awa_cli(url, "batch", "show", str(ids["batch"]))
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"Batch {ids['batch']}: 3 job(s), 1 completed, 1 failed, 0 cancelled, 1 pending",
        f"Callback: job {ids['batch']}, scheduled",
    ]
    doc = json.loads(awa_cli(url, "batch", "show", str(ids["batch"]), "--json").stdout)
    assert doc == {
        "batch_id": ids["batch"],
        "callback_state": "scheduled",
        "size": 3,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
        "pending": 1,
        "finished": False,
    }
    # A job that is not a batch's callback, and an id of no job: one line, exit 1.
    for wrong in (ids["batch_held"], 987654321):
        missing = awa_cli(url, "batch", "show", str(wrong))
        assert missing.exit_code == 1
        assert missing.stderr.splitlines()[-1] == (
            f"awa: error: batch {wrong} not found (a batch's id is its callback job's id)"
        )
    assert awa_cli(url, "batch", "show", "x").exit_code == 2


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
        ["KEY", "RUNNING", "WAITING", "HELD", "BACK"],
        ["tenant-a", "1", "2", "2"],
        ["tenant-b", "0", "1", "0"],
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
        "limit_sources": {
            "max_running_per_key": "override",
            "rate_limit_per_second": None,
            "rate_limit_burst": None,
            "global_rate_per_second": "override",
            "global_rate_burst": "override",
            "global_rate_per_key_per_second": None,
            "global_rate_per_key_burst": None,
        },
        "keys": [{"key": "tenant-a", "running": 1, "waiting": 2, "held_back": 2}],
    }
    empty = awa_cli(url, "queue", "keys", "no_such_queue")
    assert empty.stdout.splitlines()[-1] == "No concurrency key has a running or waiting job."
    assert awa_cli(url, "queue", "keys", KEYED, "--limit", "0").exit_code == 2


def test_queue_keys_show_the_limits_live_workers_configure(url: str) -> None:
    # A worker's queue config (not an override) sets the per-key limit and the per-key
    # rate: the published snapshot makes them the limits in force on every surface.
    seed_workflow(url)

    async def publish() -> None:
        pool = await open_pool(url, max_connections=1)
        try:
            registry = PostgresRuntimeRegistry(
                pool, storage_capability="canonical_drain_only", transition_role="canonical_drain"
            )
            seen = datetime.now(UTC)
            queue = QueueSnapshot(
                OTHER,
                0,
                4,
                None,
                None,
                max_running_per_key=2,
                global_rate_per_key_per_second=3.0,
                global_rate_per_key_burst=6,
            )
            await registry.upsert_runtime(
                RuntimeSnapshot(
                    id=str(uuid.uuid4()),
                    hostname="h1",
                    pid=42,
                    version="0.6.9",
                    started_at=seen,
                    last_seen_at=seen,
                    leader=False,
                    healthy=True,
                    postgres_connected=True,
                    poll_loop_alive=True,
                    heartbeat_alive=True,
                    shutting_down=False,
                    snapshot_interval_ms=10_000,
                    queues=(queue,),
                )
            )
        finally:
            await pool.close()

    with awa.Client(url) as client:
        for _ in range(3):
            client.insert({}, kind="k", queue=OTHER, concurrency_key="tenant-z")
    before = json.loads(awa_cli(url, "queue", "keys", OTHER, "--json").stdout)
    assert before["limits"]["max_running_per_key"] is None
    assert before["keys"] == [{"key": "tenant-z", "running": 0, "waiting": 3, "held_back": 0}]
    asyncio.run(publish())
    doc = json.loads(awa_cli(url, "queue", "keys", OTHER, "--json").stdout)
    assert doc["limits"]["max_running_per_key"] == 2
    assert doc["limit_sources"]["max_running_per_key"] == "workers"
    assert doc["limits"]["global_rate_per_key_per_second"] == 3.0
    assert doc["limits"]["global_rate_per_key_burst"] == 6
    assert doc["keys"] == [{"key": "tenant-z", "running": 0, "waiting": 3, "held_back": 1}]
    shown = awa_cli(url, "queue", "keys", OTHER).stdout.splitlines()
    assert shown[:2] == [
        f"Queue {OTHER}: per-key limit 2 (workers)",
        "  fleet-wide rate limit per key: 3/s, burst 6 (workers)",
    ]


HELD_REASON = "held back: key tenant-a has 1 of 1 running (max_running_per_key)"


def test_job_get_and_list_say_why_a_job_is_held_back(url: str) -> None:
    ids = seed_workflow(url)
    shown = awa_cli(url, "job", "get", str(ids["keyed_held"]))
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == HELD_REASON
    doc = json.loads(awa_cli(url, "job", "get", str(ids["keyed_held"]), "--json").stdout)
    assert doc["job"]["held_back"] == {
        "limit": "max_running_per_key",
        "key": "tenant-a",
        "running": 1,
        "max_running": 1,
        "next_admission": None,
        "reason": HELD_REASON,
    }
    free = json.loads(awa_cli(url, "job", "get", str(ids["keyed_free"]), "--json").stdout)
    assert free["job"]["held_back"] is None
    assert "held back" not in awa_cli(url, "job", "get", str(ids["keyed_free"])).stdout

    listed = awa_cli(url, "job", "list", "--queue", KEYED)
    assert listed.exit_code == 0, listed.stderr
    held_lines = [line for line in listed.stdout.splitlines() if "held back" in line]
    assert held_lines == [
        f"job {ids[name]}: {HELD_REASON}" for name in ("keyed_held_too", "keyed_held")
    ]
    rows = json.loads(awa_cli(url, "job", "list", "--queue", KEYED, "--json").stdout)
    held = {row["id"]: row["held_back"] for row in rows}
    assert held[ids["keyed_free"]] is None and held[ids["keyed_running"]] is None
    assert held[ids["keyed_held"]]["reason"] == HELD_REASON
