"""A real ``awa worker`` process: its log lines (text and JSON), its health probes through
start, load, drain and shutdown, and its Prometheus counters."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from awa import AsyncClient
from tests.fixtures.obs_app import QUEUE, Broken, Flaky, Hang, Ok
from tests.fixtures.processes import Worker, job_states, spawn_worker, wait_for

pytestmark = [pytest.mark.postgres]

READYZ_FIELDS = (
    "postgres_connected",
    "schema_version",
    "expected_schema_version",
    "schema_compatible",
    "poll_loop_alive",
    "heartbeat_alive",
    "maintenance_alive",
    "shutting_down",
    "leader",
)

APP = "tests.fixtures.obs_app"
_LISTENING = re.compile(r"health listener on http://([\d.]+):(\d+)")


def _get(base: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


def _base(worker: Worker) -> str | None:
    found = _LISTENING.search(worker.output())
    return None if found is None else f"http://{found.group(1)}:{found.group(2)}"


async def _insert(
    url: str, *jobs: Any, max_attempts: int = 25, kind: str | None = None
) -> list[int]:
    async with AsyncClient(url) as client:
        return [
            (await client.insert(job, queue=QUEUE, max_attempts=max_attempts, kind=kind)).id
            for job in jobs
        ]


def _metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _json_lines(output: str) -> list[dict[str, Any]]:
    lines = []
    for line in output.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_json_logs_probes_and_metrics_of_a_worker(
    migrated_database_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    worker = spawn_worker(
        url,
        tmp_path,
        "--queue",
        f"{QUEUE}:4",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--health-addr",
        "127.0.0.1:0",
        "--shutdown-timeout-ms",
        "4000",
        module=APP,
    )
    signalled = False
    try:
        base = wait_for(lambda: _base(worker), 20, "the health listener line")
        # Liveness answers from the moment the listener is up; readiness once running.
        assert _get(base, "/healthz")[0] == 200
        last: list[tuple[int, str]] = [(0, "")]

        def ready() -> tuple[int, str] | bool:
            last[0] = _get(base, "/readyz")
            return last[0][0] == 200 and last[0]

        try:
            _, body = wait_for(ready, 20, "readiness")
        except AssertionError as exc:
            # name the checks that kept it from being ready (seen once on a loaded host)
            raise AssertionError(f"{exc}; last /readyz: {last[0]}") from None
        report = json.loads(body)
        assert report["ready"] is True and report["failing"] == []
        # The flat body the Deployment guide names.
        assert set(READYZ_FIELDS) <= set(report), report
        assert report["schema_compatible"] is True and report["shutting_down"] is False
        assert report["schema_version"] == report["expected_schema_version"]
        assert isinstance(report["leader"], bool)
        # Directly connected, a test notification comes back: wake-ups by LISTEN.
        assert report["wakeups"] == "listen"
        assert _get(base, "/nope")[0] == 404

        ok_ids = asyncio.run(_insert(url, *(Ok(n) for n in range(5))))
        (flaky_id,) = asyncio.run(_insert(url, Flaky(1), max_attempts=3))
        (broken_id,) = asyncio.run(_insert(url, Broken(1)))
        (unknown_id,) = asyncio.run(_insert(url, Ok(99), kind="mistyped"))
        wait_for(
            lambda: (
                {s for i, s, _ in job_states(url, QUEUE) if i in (broken_id, unknown_id)}
                == {"failed"}
            ),
            20,
            "the failed jobs",
        )
        wait_for(
            lambda: all(s == "completed" for i, s, _ in job_states(url, QUEUE) if i in ok_ids),
            20,
            "the completed jobs",
        )
        metrics = wait_for(
            lambda: (
                (m := _get(base, "/metrics"))[0] == 200
                and _metric(m[1], "awa_job_retried_total") >= 1
                and m[1]
            ),
            20,
            "metrics with a retry",
        )
        assert _metric(metrics, "awa_job_completed_total", awa_job_kind="ok") == 5
        assert _metric(metrics, "awa_job_failed_total", awa_job_kind="broken") == 1
        assert _metric(metrics, "awa_job_failed_total", awa_job_kind="mistyped") == 1
        assert _metric(metrics, "awa_job_retried_total", awa_job_queue=QUEUE) >= 1
        assert _metric(metrics, "awa_job_duration_seconds_count") >= 8
        assert _metric(metrics, "awa_job_claimed_total", awa_job_queue=QUEUE) >= 8
        assert _metric(metrics, "awa_job_wait_duration_seconds_count") >= 8
        assert _metric(metrics, "awa_dispatch_claim_batches_total") >= 1
        assert _metric(metrics, "awa_completion_flushes_total") >= 1
        assert "awa_job_in_flight" in metrics

        # Drain: a running handler keeps the process live, but no longer ready.
        (hang_id,) = asyncio.run(_insert(url, Hang(2.5)))
        wait_for(
            lambda: any(i == hang_id and s == "running" for i, s, _ in job_states(url, QUEUE)),
            20,
            "the hanging job to run",
        )
        worker.process.send_signal(15)
        signalled = True
        _, body = wait_for(
            lambda: (r := _get(base, "/readyz"))[0] == 503 and r, 10, "not ready while draining"
        )
        assert json.loads(body)["shutting_down"] is True
        assert "shutting_down" in json.loads(body)["failing"]
        assert _get(base, "/healthz")[0] == 200
    finally:
        # A second SIGTERM would mean "exit now": after the first, only wait.
        code = worker.process.wait(30) if signalled else worker.stop()
    assert code == 0, worker.output()
    assert _get(base, "/healthz")[0] == 0  # closed after shutdown

    records = _json_lines(worker.output())
    by_outcome: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if "outcome" in record:
            by_outcome.setdefault(record["outcome"], []).append(record)
    completed = by_outcome["completed"][0]
    assert completed["level"] == "DEBUG"
    assert {"job_id", "kind", "queue", "attempt", "duration_ms"} <= completed.keys()
    retried = next(r for r in by_outcome["retried"] if r["job_id"] == flaky_id)
    assert retried["level"] == "WARNING" and "flaky failure 1" in retried["error"]
    broken = by_outcome["failed"][0]
    assert broken["level"] == "ERROR" and broken["job_id"] == broken_id
    assert broken["python.exception_type"] == "TerminalError"
    assert "broken for good" in broken["exception.stacktrace"]
    unknown = by_outcome["unknown_kind"][0]
    assert unknown["level"] == "ERROR" and unknown["kind"] == "mistyped"
    start = next(r for r in records if "started; queues" in r["message"])
    assert f"{QUEUE}(4)" in start["message"] and "flaky" in start["message"]


def test_text_logs_carry_the_traceback(migrated_database_url: str, tmp_path: Path) -> None:
    url = migrated_database_url
    worker = spawn_worker(
        url,
        tmp_path,
        "--queue",
        f"{QUEUE}:2",
        "--log-format",
        "text",
        start_options={"heartbeat_interval_ms": 2000, "heartbeat_staleness_ms": 3000},
        module=APP,
    )
    try:
        wait_for(lambda: "started; queues" in worker.output(), 20, "the start line")
        (flaky_id,) = asyncio.run(_insert(url, Flaky(7), max_attempts=1))
        wait_for(lambda: "failed on its last attempt" in worker.output(), 20, "the error line")
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    output = worker.output()
    line = next(x for x in output.splitlines() if "failed on its last attempt" in x)
    assert line.split()[2] == "ERROR"
    assert f"job {flaky_id} flaky (queue {QUEUE}, attempt 1/1)" in line
    assert "RuntimeError: flaky failure 7" in line
    assert "Traceback (most recent call last)" in output
    assert 'raise RuntimeError(f"flaky failure {job.args.n}")' in output
    # The misconfiguration the guide warns about is warned about.
    assert "heartbeat_staleness_ms (3000) is below 3x heartbeat_interval_ms (2000)" in output
