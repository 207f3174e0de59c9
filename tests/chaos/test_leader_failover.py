"""The maintenance leader is killed; the other runtime takes over and promotes due work,
with the workers connected directly and through PgBouncer in transaction mode
(``worker_url``, ``tests/chaos/conftest.py``).

Run the chaos tests alone with ``scripts/test-chaos`` (the test command leaves them out).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from awa import AsyncClient, JobState
from tests.fixtures.processes import query, runs, spawn_worker, wait_for, wait_registered
from tests.fixtures.worker_app import Tick

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

ELECTION_MS = 500
LEASE_MS = 1000
OPTIONS = {
    "leader_election_interval_ms": ELECTION_MS,
    "leader_lease_ttl_ms": LEASE_MS,
    "promote_interval_ms": 100,
}
QUEUES = ("--queue", "ticks:2", "--queue", "slow:1")


def _leader_backend(url: str) -> int | None:
    """The pid of the worker process holding this database's maintenance lease (its
    holder name is ``host/pid/random``), while the lease lasts."""
    rows = query(
        url,
        "SELECT holder FROM awa.leader_leases"
        " WHERE name = 'maintenance' AND expires_at > clock_timestamp()",
    )
    return int(str(rows[0]["holder"]).split("/")[-2]) if rows else None


async def _schedule(url: str, delay: float) -> int:
    async with AsyncClient(url) as client:
        job = await client.insert(
            Tick(1), queue="ticks", run_at=datetime.now(UTC) + timedelta(seconds=delay)
        )
        assert job.state == JobState.Scheduled
        return job.id


async def _state(url: str, job_id: int) -> JobState:
    async with AsyncClient(url) as client:
        return (await client.get_job(job_id)).state


def test_a_killed_leader_is_replaced_and_the_new_one_promotes(
    migrated_database_url: str, worker_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    first = spawn_worker(worker_url, tmp_path, *QUEUES, start_options=OPTIONS)
    second = None
    try:
        wait_registered(url, 1, first)
        old_leader = wait_for(lambda: _leader_backend(url), 10, "a leader")
        second = spawn_worker(worker_url, tmp_path, *QUEUES, start_options=OPTIONS)
        wait_registered(url, 2, first, second)
        # The first runtime keeps the lock: the second is a follower.
        time.sleep(ELECTION_MS / 1000 * 2)
        assert _leader_backend(url) == old_leader

        job_id = asyncio.run(_schedule(url, delay=1.0))
        first.kill()
        killed_at = time.monotonic()
        new_leader = wait_for(
            lambda: (b := _leader_backend(url)) not in (None, old_leader) and b,
            10,
            "a new leader",
            interval=0.02,
        )
        took_over = time.monotonic() - killed_at
        wait_for(
            lambda: asyncio.run(_state(url, job_id)) == JobState.Completed,
            10,
            "the scheduled job to be promoted and completed",
            interval=0.1,
        )
    finally:
        if first.process.poll() is None:
            first.kill()
        code = second.stop() if second is not None else 0
    assert code == 0, second.output() if second is not None else ""
    assert new_leader != old_leader
    # A killed leader's lease ends one ttl after its last renewal; followers try again
    # then. Allow for process scheduling.
    assert took_over < LEASE_MS / 1000 + 1.5, took_over
    done = [(pid, j) for pid, e, j, _ in runs(tmp_path) if e == "done"]
    assert done == [(second.pid, job_id)]
