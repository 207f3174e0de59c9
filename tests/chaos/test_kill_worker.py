"""``kill -9`` of a worker mid-job: another worker rescues the attempts and completes them,
with the workers connected to Postgres directly and through PgBouncer in transaction mode
(``pooled``: the workers' every transaction crosses the pooler; the test reads directly).

Run the chaos tests alone with ``scripts/test-chaos`` (the test command leaves them out).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from awa import AsyncClient, JobState
from tests.fixtures.processes import live_runtimes, runs, spawn_worker, wait_for
from tests.fixtures.worker_app import Slow

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

JOBS = 3

# The survivor notices the dead worker's attempts quickly: its heartbeats stop, and after
# this staleness the survivor (leader once the victim's lock is gone) rescues them.
RESCUER_OPTIONS = {
    "heartbeat_interval_ms": 200,
    "heartbeat_staleness_ms": 1500,
    "heartbeat_rescue_interval_ms": 250,
    "leader_election_interval_ms": 250,
}


async def _enqueue(url: str) -> list[int]:
    async with AsyncClient(url) as client:
        return [(await client.insert(Slow(120.0), queue="slow")).id for _ in range(JOBS)]


async def _jobs(url: str, ids: list[int]) -> list[tuple[JobState, int, list[dict[str, object]]]]:
    async with AsyncClient(url) as client:
        jobs = [await client.get_job(i) for i in ids]
    return [(j.state, j.attempt, j.errors) for j in jobs]


def test_killed_workers_attempts_are_rescued_and_completed(
    migrated_database_url: str, worker_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    ids = asyncio.run(_enqueue(url))
    victim = spawn_worker(worker_url, tmp_path, "--queue", "slow:5", "--queue", "ticks:1")
    survivor = None
    try:
        started = wait_for(
            lambda: (
                {j for pid, e, j, _ in runs(tmp_path) if e == "start" and pid == victim.pid}
                == set(ids)
            ),
            30,
            "the victim to start every job",
        )
        assert started
        assert all(s == JobState.Running for s, _, _ in asyncio.run(_jobs(url, ids)))

        victim.kill()
        killed_at = time.monotonic()
        survivor = spawn_worker(
            worker_url,
            tmp_path,
            "--queue",
            "slow:5",
            "--queue",
            "ticks:1",
            start_options=RESCUER_OPTIONS,
        )

        def all_completed() -> bool:
            return all(s == JobState.Completed for s, _, _ in asyncio.run(_jobs(url, ids)))

        wait_for(all_completed, 30, "the rescued jobs to complete", interval=0.2)
        recovery = time.monotonic() - killed_at
    finally:
        if victim.process.poll() is None:
            victim.kill()
        code = survivor.stop() if survivor is not None else 0
    assert code == 0, survivor.output() if survivor is not None else ""

    for state, attempt, errors in asyncio.run(_jobs(url, ids)):
        assert state == JobState.Completed and attempt == 2
        assert "heartbeat stale" in str(errors[-1]["error"]), errors
    finished = {(pid, j) for pid, e, j, _ in runs(tmp_path) if e == "done"}
    assert finished == {(survivor.pid, j) for j in ids}
    # The victim's row stays behind (it could not remove it); the survivor removed its own.
    assert [r["pid"] for r in live_runtimes(url)] == [victim.pid]
    assert recovery < 25
