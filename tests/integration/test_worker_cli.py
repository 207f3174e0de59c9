"""``awa worker``: loading a user module, serving its queues, signals and supervision."""

from __future__ import annotations

import asyncio
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest

from awa import AsyncClient
from awa.entrypoints.cli import main
from awa.entrypoints.cli.worker import load_client, parse_queue, start_options, subset_warnings
from tests.fixtures.poison_app import Raise
from tests.fixtures.processes import (
    completed_in,
    done_counts,
    job_states,
    live_runtimes,
    query,
    runs,
    spawn_worker,
    wait_for,
)
from tests.fixtures.worker_app import Slow, Tick

pytestmark = [pytest.mark.postgres]


def test_parse_queue() -> None:
    assert parse_queue("email") == ("email", 10)
    assert parse_queue("email:3") == ("email", 3)
    assert parse_queue("ns:email:2") == ("ns:email", 2)
    for bad in ("email:0", "email:x", ":3"):
        with pytest.raises(click.BadParameter):
            parse_queue(bad)


def test_module_conventions(migrated_database_url: str) -> None:
    async def scenario() -> None:
        with_factory = types.ModuleType("app_factory")

        async def create_client() -> AsyncClient:
            return AsyncClient(migrated_database_url)

        with_factory.create_client = create_client  # type: ignore[attr-defined]
        made = await load_client(with_factory, None)
        await made.close()

        with_client = types.ModuleType("app_client")
        existing = AsyncClient(migrated_database_url)
        with_client.client = existing  # type: ignore[attr-defined]
        with_client.start_options = {"poll_interval_ms": 50}  # type: ignore[attr-defined]
        assert await load_client(with_client, None) is existing
        assert start_options(with_client, [("q", 2)]) == {
            "poll_interval_ms": 50,
            "queues": [("q", 2)],
            "only_listed_queues": True,
        }
        assert start_options(with_client, []) == {"poll_interval_ms": 50}
        await existing.close()

        with pytest.raises(click.ClickException, match="neither create_client"):
            await load_client(types.ModuleType("empty"), None)
        wrong = types.ModuleType("wrong")
        wrong.client = object()  # type: ignore[attr-defined]
        with pytest.raises(click.ClickException, match=r"must provide an awa\.AsyncClient"):
            await load_client(wrong, None)

    asyncio.run(scenario())


def test_unknown_module_fails_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--database-url", "postgresql://unused", "worker", "--module", "no.such.mod"])
    assert code == 1
    assert "cannot import module 'no.such.mod'" in capsys.readouterr().err


async def _insert(url: str, *jobs: object, queue: str) -> list[int]:
    async with AsyncClient(url) as client:
        return [(await client.insert(job, queue=queue)).id for job in jobs]


def test_worker_serves_queues_and_drains_on_sigterm(
    migrated_database_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    worker = spawn_worker(url, tmp_path, "--queue", "ticks:4", "--queue", "slow:2")
    try:
        (row,) = wait_for(lambda: live_runtimes(url), 20, "the worker's runtime row")
        assert row["pid"] == worker.pid
        assert sorted(q["name"] for q in row["queues"]) == ["slow", "ticks"]
        ids = asyncio.run(_insert(url, *(Tick(n) for n in range(50)), queue="ticks"))
        wait_for(lambda: completed_in(url, "ticks") == 50, 20, "50 completed jobs")
        assert set(done_counts(tmp_path)) == set(ids)
        # A running handler is allowed to finish during a graceful shutdown.
        (slow_id,) = asyncio.run(_insert(url, Slow(1.5), queue="slow"))
        wait_for(lambda: any(e == "start" for _, e, _, _ in runs(tmp_path)), 10, "start")
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert "started; queues: slow(2), ticks(4)" in worker.output()
    assert "stopped" in worker.output()
    assert job_states(url, "slow") == [(slow_id, "completed", 1)]
    assert live_runtimes(url) == []


def test_subset_warnings() -> None:
    assert subset_warnings(["a", "b", "c"], [("a", 1)]) == [
        "handlers registered for queue(s) b, c will not run in this worker (not named by --queue)"
    ]
    assert subset_warnings(["a"], [("a", 1), ("z", 2)]) == [
        "no handler is registered for queue(s) z; their jobs will fail as unknown kinds"
    ]
    assert subset_warnings(["a"], [("a", 1)]) == []


def test_worker_serves_exactly_the_named_queues(migrated_database_url: str, tmp_path: Path) -> None:
    url = migrated_database_url
    worker = spawn_worker(url, tmp_path, "-q", "ticks:3")
    try:
        (row,) = wait_for(lambda: live_runtimes(url), 20, "the worker's runtime row")
        assert [q["name"] for q in row["queues"]] == ["ticks"]
        asyncio.run(_insert(url, Tick(1), Tick(2), queue="ticks"))
        (slow_id,) = asyncio.run(_insert(url, Slow(0.01), queue="slow"))
        wait_for(lambda: completed_in(url, "ticks") == 2, 20, "2 completed ticks")
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    # The app also registers a handler on "tallies" (the batch tests' queue).
    assert "handlers registered for queue(s) slow, tallies will not run in this worker" in (
        worker.output()
    )
    assert "started; queues: ticks(3)" in worker.output()
    assert job_states(url, "slow") == [(slow_id, "available", 0)]


def test_processes_are_supervised(migrated_database_url: str, tmp_path: Path) -> None:
    url = migrated_database_url
    supervisor = spawn_worker(
        url, tmp_path, "--processes", "2", "--queue", "ticks:2", "--queue", "slow:1"
    )
    try:
        rows = wait_for(
            lambda: len(live_runtimes(url)) == 2 and live_runtimes(url), 30, "two runtimes"
        )
        pids = {r["pid"] for r in rows}
        assert supervisor.pid not in pids
    finally:
        code = supervisor.stop()
    assert code == 0, supervisor.output()
    assert supervisor.output().count("stopped") == 2
    assert live_runtimes(url) == []


def test_a_failing_child_fails_the_supervisor(tmp_path: Path) -> None:
    # The fixture's create_client() refuses to run without a database URL.
    broken = spawn_worker("", tmp_path, "--processes", "2")
    code = broken.process.wait(60)
    assert code == 1, broken.output()
    assert "exited with status 1" in broken.output()


BASE_EXCEPTIONS = ["SystemExit", "KeyboardInterrupt", "CancelledError", "GeneratorExit", "Own"]


def test_handlers_raising_base_exceptions_fail_their_job_and_the_worker_carries_on(
    migrated_database_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    worker = spawn_worker(
        url,
        tmp_path,
        "--queue",
        "poison:2",
        "--queue",
        "ticks:2",
        "--queue",
        "slow:1",
        # the long job is given back when this grace ends (the default is 5 s)
        "--shutdown-timeout-ms",
        "500",
        start_options={"heartbeat_interval_ms": 200},
        module="tests.fixtures.poison_app",
    )
    try:
        wait_for(lambda: live_runtimes(url), 20, "the worker's runtime row")
        # A long job keeps heartbeating while the others blow up beside it.
        (slow_id,) = asyncio.run(_insert(url, Slow(30.0), queue="slow"))
        bad = asyncio.run(
            _insert_kinds(url, [(kind, what) for what in BASE_EXCEPTIONS for kind in KINDS])
        )
        wait_for(
            lambda: sum(state == "failed" for _, state, _ in job_states(url, "poison")) == len(bad),
            30,
            "every raising job failed",
        )
        ids = asyncio.run(_insert(url, *(Tick(n) for n in range(10)), queue="ticks"))
        wait_for(lambda: completed_in(url, "ticks") == 10, 20, "the jobs after them completed")
        assert set(done_counts(tmp_path)) >= set(ids)
        beats = [
            query(url, "SELECT heartbeat_at FROM awa.jobs WHERE id = %s", slow_id)[0][
                "heartbeat_at"
            ]
        ]
        wait_for(
            lambda: (
                query(url, "SELECT heartbeat_at FROM awa.jobs WHERE id = %s", slow_id)[0][
                    "heartbeat_at"
                ]
                != beats[0]
            ),
            10,
            "a fresh heartbeat of the long job",
        )
        (row,) = live_runtimes(url)
        assert row["pid"] == worker.pid
        # Leader duties go on: a scheduled job is promoted and run.
        asyncio.run(_insert_scheduled(url, Tick(99), queue="ticks"))
        wait_for(lambda: completed_in(url, "ticks") == 11, 20, "the promoted job completed")
    finally:
        code = worker.stop(timeout=15)
    assert code == 0, worker.output()
    # The long job was given back unspent at shutdown, not failed.
    assert job_states(url, "slow") == [(slow_id, "retryable", 0)]
    for job_id, kind_what in bad.items():
        (found,) = query(url, "SELECT state, errors FROM awa.jobs WHERE id = %s", job_id)
        assert found["state"] == "failed"
        expected = "CustomBase" if kind_what[1] == "Own" else kind_what[1]
        assert found["errors"][-1]["error"].startswith(expected), (kind_what, found)


KINDS = ["raise", "raise_sync"]


async def _insert_kinds(url: str, jobs: list[tuple[str, str]]) -> dict[int, tuple[str, str]]:
    async with AsyncClient(url) as client:
        found: dict[int, tuple[str, str]] = {}
        for kind, what in jobs:
            job = await client.insert(Raise(what), kind=kind, queue="poison", max_attempts=1)
            found[job.id] = (kind, what)
        return found


async def _insert_scheduled(url: str, job: object, *, queue: str) -> int:
    async with AsyncClient(url) as client:
        when = datetime.now(UTC) + timedelta(seconds=1)
        return (await client.insert(job, queue=queue, run_at=when)).id
