"""A fleet of worker processes: 3,000 jobs, each handled exactly once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from awa import AsyncClient
from tests.fixtures.processes import (
    completed_in,
    done_counts,
    job_states,
    live_runtimes,
    spawn_worker,
    wait_for,
)
from tests.fixtures.worker_app import Tick

pytestmark = [pytest.mark.postgres]

#: Enough that every process claims many batches beside the others (the chaos run and the
#: fleet benchmark take larger backlogs); 10,000 took 16.5 s of the test command.
JOBS = 3_000
PROCESSES = 3


async def _enqueue(url: str) -> set[int]:
    async with AsyncClient(url) as client:
        inserted = await client.insert_many_copy([Tick(n) for n in range(JOBS)], queue="ticks")
    return {job.id for job in inserted}


def test_three_worker_processes_complete_every_job_exactly_once(
    migrated_database_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    ids = asyncio.run(_enqueue(url))
    assert len(ids) == JOBS
    started = time.monotonic()
    fleet = spawn_worker(
        url,
        tmp_path,
        "--processes",
        str(PROCESSES),
        "--queue",
        "ticks:16",
        "--queue",
        "slow:1",
    )
    try:
        wait_for(lambda: len(live_runtimes(url)) == PROCESSES, 30, "three runtimes")

        wait_for(
            lambda: completed_in(url, "ticks") == JOBS, 90, f"{JOBS} completed jobs", interval=0.25
        )
        elapsed = time.monotonic() - started
    finally:
        code = fleet.stop(timeout=30)
    assert code == 0, fleet.output()

    counts = done_counts(tmp_path)
    duplicates = {job_id: n for job_id, n in counts.items() if n > 1}
    assert duplicates == {}
    assert set(counts) == ids
    states = job_states(url, "ticks")
    assert len(states) == JOBS
    assert {(state, attempt) for _, state, attempt in states} == {("completed", 1)}
    pids = {path.stem for path in tmp_path.glob("*.log")}
    assert len(pids) == PROCESSES, f"only {len(pids)} processes did any work"
    print(f"{JOBS} jobs on {PROCESSES} processes in {elapsed:.1f}s")
