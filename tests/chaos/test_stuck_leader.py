"""A leader that cannot act does not stop the fleet's maintenance (ADR 0014).

A SIGSTOPped leader loses its lease one ttl after its last renewal; another worker takes
over, promotes due jobs and rescues a SIGKILLed worker's; the old leader, once resumed,
steps down without acting. A leader whose event loop an ``async def`` handler blocks
keeps leading (maintenance has a thread of its own) and names the handler. The workers
connect directly and through PgBouncer in transaction mode (``worker_url``,
``tests/chaos/conftest.py``); the tests read through the database itself.

Run the chaos tests alone with ``scripts/test-chaos`` (the test command leaves them out).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from awa import AsyncClient
from tests.chaos.test_leader_failover import _leader_backend
from tests.fixtures.leader_app import Block
from tests.fixtures.processes import (
    Worker,
    query,
    runs,
    spawn_worker,
    wait_for,
    wait_registered,
)
from tests.fixtures.worker_app import Slow, Tick

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

MODULE = "tests.fixtures.leader_app"
LEASE_MS = 3000
OPTIONS: dict[str, Any] = {
    "leader_election_interval_ms": 500,
    "leader_lease_ttl_ms": LEASE_MS,
    "promote_interval_ms": 100,
    "heartbeat_interval_ms": 200,
    "heartbeat_staleness_ms": 1500,
    "heartbeat_rescue_interval_ms": 200,
}


def _spawn(url: str, tmp_path: Path, *queues: str) -> Worker:
    args = [arg for queue in queues for arg in ("--queue", queue)]
    return spawn_worker(url, tmp_path, *args, start_options=OPTIONS, module=MODULE)


async def _insert(url: str, args: Any, queue: str, delay: float = 0.0) -> int:
    async with AsyncClient(url, max_connections=1) as client:
        run_at = datetime.now(UTC) + timedelta(seconds=delay) if delay else None
        return (await client.insert(args, queue=queue, run_at=run_at)).id


async def _insert_many(url: str, args: list[Any], queue: str, delay: float) -> list[int]:
    async with AsyncClient(url, max_connections=1) as client:
        run_at = datetime.now(UTC) + timedelta(seconds=delay)
        return [(await client.insert(a, queue=queue, run_at=run_at)).id for a in args]


def _wait_states(url: str, ids: list[int], timeout: float, what: str) -> None:
    """Wait until every job of ``ids`` completed; on timeout, say where each one is."""
    try:
        wait_for(lambda: _states(url, ids) == ["completed"] * len(ids), timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: states {_states(url, ids)}") from None


def _states(url: str, ids: list[int]) -> list[str]:
    rows = query(url, "SELECT id, state::text AS state FROM awa.jobs WHERE id = ANY(%s)", ids)
    by_id = {int(r["id"]): str(r["state"]) for r in rows}
    return [by_id.get(i, "?") for i in ids]


def _attempts(url: str, ids: list[int]) -> list[int]:
    rows = query(url, "SELECT attempt FROM awa.jobs WHERE id = ANY(%s)", ids)
    return [int(r["attempt"]) for r in rows]


def _stop_all(*workers: Worker | None) -> None:
    for worker in workers:
        if worker is None or worker.process.poll() is not None:
            continue
        os.kill(worker.pid, signal.SIGCONT)
        worker.kill()


def test_a_stopped_leader_is_replaced_and_steps_down_when_it_resumes(
    migrated_database_url: str, worker_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    # The leader serves a queue nobody writes to: every job below runs elsewhere.
    leader = _spawn(worker_url, tmp_path, "blocking:1")
    victim = follower = None
    try:
        wait_for(lambda: _leader_backend(url) == leader.pid, 30, "the first worker to lead")
        victim = _spawn(worker_url, tmp_path, "slow:2")
        slow = [asyncio.run(_insert(url, Slow(120.0), "slow")) for _ in range(2)]
        wait_for(
            lambda: sum(e == "start" for _, e, _, _ in runs(tmp_path)) == 2,
            30,
            "the victim to start both slow jobs",
        )
        follower = _spawn(worker_url, tmp_path, "ticks:2", "slow:2")
        wait_registered(url, 3, leader, victim, follower)
        assert _leader_backend(url) == leader.pid
        due = asyncio.run(_insert_many(url, [Tick(n) for n in range(5)], "ticks", delay=2.0))

        victim.kill()
        os.kill(leader.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_for(
            lambda: _leader_backend(url) == follower.pid, 20, "the follower to lead", interval=0.02
        )
        took_over = time.monotonic() - stopped_at
        wait_for(lambda: _states(url, due) == ["completed"] * 5, 20, "the due jobs to be promoted")
        # The killed worker's attempts were rescued and ran again on the follower.
        _wait_states(url, slow, 30, "the victim's jobs to be rescued")
        assert _attempts(url, slow) == [2, 2]

        os.kill(leader.pid, signal.SIGCONT)
        wait_for(
            lambda: "stepping down before acting again" in leader.output(),
            20,
            "the resumed leader to step down",
        )
        # It stays a follower: the lease keeps its new holder.
        time.sleep(LEASE_MS / 1000)
        assert _leader_backend(url) == follower.pid
    finally:
        _stop_all(leader, victim)
        code = follower.stop() if follower is not None else 0
    assert code == 0, follower.output() if follower is not None else ""
    out = leader.output()
    assert out.count("became maintenance leader") == 1, out
    # From a stop to a takeover: one lease ttl, plus process scheduling on a busy host.
    assert took_over < LEASE_MS / 1000 + 3.0, took_over
    done = [j for pid, e, j, _ in runs(tmp_path) if e == "done"]
    assert sorted(done) == sorted(due + slow)


def test_a_handler_blocking_the_leaders_loop_does_not_stop_maintenance(
    migrated_database_url: str, worker_url: str, tmp_path: Path
) -> None:
    url = migrated_database_url
    leader = _spawn(worker_url, tmp_path, "blocking:1")
    other = None
    try:
        wait_for(lambda: _leader_backend(url) == leader.pid, 30, "the first worker to lead")
        other = _spawn(worker_url, tmp_path, "ticks:2")
        wait_registered(url, 2, leader, other)
        blocker = asyncio.run(_insert(url, Block(8.0), "blocking"))
        wait_for(lambda: (leader.pid, "start", blocker, 1) in runs(tmp_path), 20, "the block")
        due = asyncio.run(_insert_many(url, [Tick(n) for n in range(3)], "ticks", delay=1.0))
        # The leader's loop is blocked, yet its maintenance thread promotes the other
        # queue's due jobs and keeps the lease.
        _wait_states(url, due, 6, "the due jobs to run")
        assert _leader_backend(url) == leader.pid
        wait_for(
            lambda: (
                f"handler kind=block job {blocker} attempt 1 (queue blocking)" in leader.output()
            ),
            5,
            "the watchdog's warning",
        )
        assert (leader.pid, "done", blocker, 1) not in runs(tmp_path)
    finally:
        code = leader.stop(30)
        if other is not None:
            other.stop()
    assert code == 0, leader.output()
    assert "the event loop has been blocked for" in leader.output()
