"""How long the fleet goes without maintenance when its leader stops, dies or is
starved (ADR 0014).

Starts ``--workers`` ``awa worker`` processes (default settings unless ``--lease-ms`` /
``--election-ms``), waits for a leader, schedules ``--jobs`` jobs due one second later,
then hits the leader with ``--fault``: ``stop`` (SIGSTOP), ``kill`` (SIGKILL). Prints
how long until another worker held the lease (read from ``awa.leader_leases``) and how
late the due jobs completed against their due time. Repeats ``--rounds`` times with a
fresh fleet each time.

    python -m benchmarks.leader_failover --fault stop --rounds 3
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from awa import AsyncClient
from benchmarks._common import drop_database, fresh_database, parser
from benchmarks._failover_app import Tick

ROOT = Path(__file__).resolve().parents[1]


def _holder(url: str) -> int | None:
    """The pid of the worker whose lease is live (holder ``host/pid/random``)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT holder FROM awa.leader_leases"
            " WHERE name = 'maintenance' AND expires_at > clock_timestamp()"
        ).fetchone()
    return None if row is None else int(str(row[0]).split("/")[-2])


def _completed(url: str, ids: list[int]) -> list[datetime]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT finalized_at FROM awa.jobs WHERE id = ANY(%s) AND state = 'completed'",
            (ids,),
        ).fetchall()
    return [r[0] for r in rows]


def _poll(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


async def _schedule(url: str, jobs: int, due_at: datetime) -> list[int]:
    async with AsyncClient(url, max_connections=1) as client:
        return [
            (await client.insert(Tick(n), queue="ticks", run_at=due_at)).id for n in range(jobs)
        ]


def _round(url: str, args: Any, options: dict[str, Any], out: Path) -> tuple[float, float]:
    env = {**os.environ, "DATABASE_URL": url, "AWA_BENCH_START": json.dumps(options)}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "awa", "worker", "--module", "benchmarks._failover_app"]
    workers = []
    with out.open("ab") as sink:
        for _ in range(args.workers):
            workers.append(
                subprocess.Popen(
                    [*command, "--queue", "ticks:4"], env=env, stdout=sink, stderr=sink
                )
            )
    try:
        leader_pid = _poll(lambda: _holder(url), 60, "a leader")
        leader = next(w for w in workers if w.pid == leader_pid)
        due_at = datetime.now(UTC) + timedelta(seconds=1)
        ids = asyncio.run(_schedule(url, args.jobs, due_at))
        # hit the leader just before the jobs fall due
        time.sleep(max(0.0, (due_at - datetime.now(UTC)).total_seconds() - 0.5))
        os.kill(leader.pid, signal.SIGSTOP if args.fault == "stop" else signal.SIGKILL)
        hit = time.monotonic()
        _poll(lambda: _holder(url) not in (None, leader.pid), 120, "a new leader")
        takeover = time.monotonic() - hit

        def all_done() -> list[datetime] | None:
            done = _completed(url, ids)
            return done if len(done) == len(ids) else None

        done = _poll(all_done, 120, "the due jobs to complete")
        late = max((d - due_at).total_seconds() for d in done)
        return takeover, late
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()
            worker.wait()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--fault", choices=("stop", "kill"), default="stop")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lease-ms", type=int, default=None, help="leader_lease_ttl_ms")
    p.add_argument("--election-ms", type=int, default=None, help="leader_election_interval_ms")
    args = p.parse_args()
    options: dict[str, Any] = {}
    if args.lease_ms is not None:
        options["leader_lease_ttl_ms"] = args.lease_ms
    if args.election_ms is not None:
        options["leader_election_interval_ms"] = args.election_ms
    name = args.db or "awa_bench_leader_failover"
    out = Path(f"/tmp/{name}.out")
    takeovers, lates = [], []
    try:
        for n in range(args.rounds):
            url = fresh_database(args.admin_url, name)
            subprocess.run(
                [sys.executable, "-m", "awa", "--database-url", url, "migrate"],
                check=True,
                capture_output=True,
            )
            takeover, late = _round(url, args, options, out)
            takeovers.append(takeover)
            lates.append(late)
            print(f"round {n + 1}: new leader after {takeover:.2f} s; due jobs {late:.2f} s late")
    finally:
        drop_database(args.admin_url, name)
    print(
        f"{args.fault}, {args.workers} workers, options {options or 'default'}: takeover "
        f"median {statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s; due "
        f"jobs late median {statistics.median(lates):.2f} s, max {max(lates):.2f} s "
        f"(worker output: {out})"
    )


if __name__ == "__main__":
    main()
