"""The REST API answers in awa-cli 0.6.9's JSON shapes, on the same seeded data.

``tests/fixtures/awa_cli_rest_shapes.json`` holds the shapes (key names and value types,
recursively) of awa-cli 0.6.9's ``awa serve`` answers over ``tests/differential/
rest_seed.py``'s data, recorded by ``tests/differential/record_rest_shapes.py`` on a
database that awa-pg 0.6.9 migrated and seeded. Here the same seed runs through this
package and each answer must hold every key of the original with a type its readers
accept; extra keys are fine.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import awa
from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.differential import rest_seed
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

RECORDED = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "awa_cli_rest_shapes.json").read_text("utf-8")
)

#: Where the two implementations store different values, not different shapes; each is
#: listed in the README's differences from awa-pg 0.6.9.
VALUE_DIFFERENCES = {
    # awa-pg stamps finalized_at when an attempt ends retryable; this package keeps it
    # null until the job is finished.
    ("job_retryable", "$.finalized_at: ['null'] where the original has ['string']"),
}


@pytest.fixture
async def served(migrated_database_url: str) -> AsyncIterator[tuple[rest_seed.Seeded, Any]]:
    seeded = await rest_seed.seed(awa, migrated_database_url)
    app = create_app(ServerConfig(database_url=migrated_database_url, cache_ttl=0.0))
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:3000"
            ) as http:
                yield seeded, http
    finally:
        await seeded.release()


def test_the_recording_covers_the_seven_endpoints() -> None:
    paths = set(RECORDED["endpoints"].values())
    for prefix in ("/api/jobs/", "/api/dlq", "/api/queues", "/api/kinds", "/api/runtime"):
        assert any(p.startswith(prefix) for p in paths), prefix
    assert "/api/queues/runtime" in paths
    assert set(RECORDED["status"].values()) == {200}


async def test_every_answer_holds_the_original_shape(
    served: tuple[rest_seed.Seeded, Any],
) -> None:
    seeded, http = served
    problems: dict[str, list[str]] = {}
    for label, path in rest_seed.endpoints(seeded).items():
        answer = await http.get(path)
        if answer.status_code != 200:
            problems[label] = [f"{answer.status_code}: {answer.text}"]
            continue
        found = [
            problem
            for problem in rest_seed.shape_problems(
                RECORDED["shapes"][label], rest_seed.shape(answer.json())
            )
            if (label, problem) not in VALUE_DIFFERENCES
        ]
        if found:
            problems[label] = found
    assert problems == {}, json.dumps(problems, indent=1)


def test_a_missing_key_or_a_changed_type_is_reported() -> None:
    theirs = rest_seed.shape({"a": 1, "b": [{"c": "x"}], "d": None, "e": 1.5})
    assert rest_seed.shape_problems(theirs, theirs) == []
    ours = rest_seed.shape({"a": "1", "b": [{"z": 1}], "e": 2, "extra": True})
    assert rest_seed.shape_problems(theirs, ours) == [
        "$.a: ['string'] where the original has ['integer']",
        "$.b[].c: missing",
        "$.d: missing",
    ]


async def test_the_queue_and_kind_lists_show_what_awa_cli_shows(
    served: tuple[rest_seed.Seeded, Any],
) -> None:
    """The same queues and kinds with the same counts as awa-cli's recorded answers: the
    served queue whose jobs are all dead-lettered, the dead-lettered kind, the declared
    kind with no jobs; and the kind no worker handles is flagged."""
    _, http = served
    theirs = RECORDED["answers"]
    queues = {q["queue"]: q for q in (await http.get("/api/queues")).json()}
    assert sorted(queues) == sorted(q["queue"] for q in theirs["queues"])
    # awa-pg's running and total_queued come from counters that trailed the held job when
    # recorded; the per-state counts of settled jobs are compared.
    for q in theirs["queues"]:
        ours = queues[q["queue"]]
        for key in ("failed", "scheduled", "retryable", "waiting_external", "available"):
            assert ours[key] == q[key], (q["queue"], key)
    graveyard = (await http.get("/api/queues/graveyard")).json()
    assert (graveyard["failed"], graveyard["dlq_depth"], graveyard["display_name"]) == (
        2,
        2,
        "Graveyard",
    )
    kinds = {k["kind"]: k for k in (await http.get("/api/kinds")).json()}
    assert sorted(kinds) == sorted(k["kind"] for k in theirs["kinds"])
    for k in theirs["kinds"]:
        # awa-cli's count left out the running send_email job (held by its handler while
        # recorded); this package counts it.
        running = 1 if k["kind"] == "send_email" else 0
        assert (kinds[k["kind"]]["job_count"], kinds[k["kind"]]["queue_count"]) == (
            k["job_count"] + running,
            k["queue_count"],
        ), k["kind"]
    assert {name for name, k in kinds.items() if k["handler_missing"]} == {"orphan"}
    assert kinds["idle_kind"]["description"] == "Never enqueued"
    assert (await http.get("/api/stats/kinds")).json() == theirs["stats_kinds"]
    assert (await http.get("/api/stats/queues")).json() == theirs["stats_queues"]
    stats = (await http.get("/api/stats")).json()
    assert stats["running"] == 1  # awa-cli's trailing counter showed 0 for the held job
    assert {**stats, "running": 0} == theirs["stats"]


async def test_the_kinds_page_flags_the_kind_no_worker_handles(
    served: tuple[rest_seed.Seeded, Any],
) -> None:
    _, http = served
    page = (await http.get("/kinds")).text
    rows = {row.split("</a>")[0].rsplit(">", 1)[-1]: row for row in page.split("<tr>")[2:]}
    assert "no handler" in rows["orphan"]
    assert not [kind for kind, row in rows.items() if "no handler" in row and kind != "orphan"]


async def test_runtime_queue_configs_match_awa_cli(served: tuple[rest_seed.Seeded, Any]) -> None:
    """The same start() arguments give the same per-queue ``config`` as awa-cli reports
    for awa-pg's runtime (capacity, claim settings, deadlines, aging, mode)."""
    _, http = served
    theirs = {q["queue"]: q for q in RECORDED["answers"]["queues_runtime"]}
    ours = {q["queue"]: q for q in (await http.get("/api/queues/runtime")).json()}
    assert sorted(ours) == sorted(theirs)
    for name, q in theirs.items():
        assert ours[name]["config"] == q["config"], name
        assert (ours[name]["live_instances"], ours[name]["config_mismatch"]) == (1, False)
    (recorded,) = RECORDED["answers"]["runtime"]["instances"]

    async def published() -> Any:
        # The runtime publishes its row again as soon as it takes the lease.
        (instance,) = (await http.get("/api/runtime")).json()["instances"]
        return instance if instance["leader"] == recorded["leader"] else None

    instance = await until(published, "the runtime's row names it leader")
    for key in ("storage_capability", "transition_role", "leader", "maintenance_alive"):
        assert instance[key] == recorded[key], key


async def test_runtimes_configuring_a_queue_differently_are_a_config_mismatch(
    served: tuple[rest_seed.Seeded, Any], migrated_database_url: str
) -> None:
    _, http = served
    other = awa.AsyncClient(migrated_database_url)

    @other.task(rest_seed.SendEmail, kind="send_email", queue="mail")
    async def send_email(job: Any) -> None:
        return None

    await other.start([("mail", 9)])
    try:

        async def both_live() -> dict[str, Any] | None:
            queues = {q["queue"]: q for q in (await http.get("/api/queues/runtime")).json()}
            mail: dict[str, Any] = queues["mail"]
            return mail if mail["live_instances"] == 2 else None

        mail = await until(both_live, "both runtimes are live on mail", timeout=10)
        assert mail["config_mismatch"] is True and mail["instance_count"] == 2
        assert sorted(i["config"]["max_workers"] for i in mail["instances"]) == [4, 9]
    finally:
        await other.shutdown()
        await other.close()
