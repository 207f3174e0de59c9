"""A batch (ADR 0035) worked by several worker processes, one of them killed with
``kill -9`` while it runs some of the batch's jobs: the survivors rescue those, finish
the batch, and its callback runs exactly once, after the last job, with the exact counts
(a rescue is not an end: the rescued jobs count once, as completed).

Run the chaos tests alone with ``scripts/test-chaos`` (the test command leaves them out).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import awa
from awa import AsyncClient, JobState
from awa.entrypoints.batches import InsertedBatch
from tests.fixtures.processes import done_counts, runs, spawn_worker, wait_for
from tests.fixtures.worker_app import Fails, Slow, Tally, Tick

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

SLOW = 3
TICKS = 20
QUEUES = ("--queue", "slow:5", "--queue", "ticks:4", "--queue", "tallies:1")
RESCUER_OPTIONS = {
    "heartbeat_interval_ms": 200,
    "heartbeat_staleness_ms": 1500,
    "heartbeat_rescue_interval_ms": 250,
    "leader_election_interval_ms": 250,
}


async def _insert(url: str) -> InsertedBatch:
    batch = awa.Batch(Tally("nightly"), kind="tally", queue="tallies")
    for _ in range(SLOW):
        batch.add(Slow(120.0), kind="slow", queue="slow")
    for n in range(TICKS):
        batch.add(Tick(n), kind="tick", queue="ticks")
    batch.add(Fails("the source is gone"), kind="fails", queue="ticks", max_attempts=1)
    async with AsyncClient(url) as client:
        return await batch.insert(client)


async def _state(url: str, job_id: int) -> JobState:
    async with AsyncClient(url) as client:
        return (await client.get_job(job_id)).state


async def _result(url: str, job_id: int) -> object:
    async with AsyncClient(url) as client:
        return await client.wait_for(job_id, timeout=5)


def test_a_killed_workers_batch_jobs_are_rescued_and_the_callback_runs_once(
    migrated_database_url: str, worker_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    inserted = asyncio.run(_insert(url))
    slow = {job.id for job in inserted.jobs[:SLOW]}
    victim = spawn_worker(worker_url, tmp_path, "--queue", "slow:5")
    survivors = []
    try:
        wait_for(
            lambda: {j for pid, e, j, _ in runs(tmp_path) if e == "start"} == slow,
            30,
            "the victim to start every slow job",
        )
        victim.kill()
        survivors = [
            spawn_worker(worker_url, tmp_path, *QUEUES, start_options=RESCUER_OPTIONS)
            for _ in range(2)
        ]
        wait_for(
            lambda: asyncio.run(_state(url, inserted.id)) == JobState.Completed,
            60,
            "the batch's callback to complete",
            interval=0.2,
        )
    finally:
        if victim.process.poll() is None:
            victim.kill()
        codes = [worker.stop() for worker in survivors]
    assert codes == [0, 0], [worker.output() for worker in survivors]

    assert asyncio.run(_result(url, inserted.id)) == {
        "size": SLOW + TICKS + 1,
        "completed": SLOW + TICKS,
        "failed": 1,
        "cancelled": 0,
        "pending": 0,
    }
    done = done_counts(tmp_path)
    assert done[inserted.id] == 1
    assert all(done[job.id] == 1 for job in inserted.jobs)
    rescued = [(pid, j, a) for pid, e, j, a in runs(tmp_path) if e == "done" and j in slow]
    assert sorted(a for _, _, a in rescued) == [2] * SLOW
    assert victim.pid not in {pid for pid, _, _ in rescued}
