"""``awa worker``: loading a user module, serving its queues, signals and supervision."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

import click
import pytest

from awa import AsyncClient
from awa.entrypoints.cli import main
from awa.entrypoints.cli.worker import load_client, parse_queue, start_options, subset_warnings
from tests.fixtures.processes import (
    completed_in,
    done_counts,
    job_states,
    live_runtimes,
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
    assert "handlers registered for queue(s) slow will not run in this worker" in (worker.output())
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
