"""Per-key concurrency across a fleet, probed from outside (issue 43's invariant probe):
``--processes`` worker processes (default 4) serve one queue with
``"max_running_per_key": --limit`` (default 2) over ``--jobs`` jobs (default 50,000) spread
over ``--keys`` concurrency keys (default 200), each handler sleeping a random 0-20 ms.
A sampler reads the running jobs per key from ``awa.jobs`` every 10 ms (plain SQL, no
``pg_stat_activity``); halfway through the drain one worker is killed with SIGKILL, and
its attempts come back through the heartbeat rescue. Printed: the most running at once
for any key over every sample, how many samples were taken, and whether every job
completed exactly once (none lost).

    .venv/bin/python -m benchmarks.per_key_probe
    .venv/bin/python -m benchmarks.per_key_probe --jobs 5000 --keys 200
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import psycopg

import awa
from benchmarks._common import drop_database, fresh_database, parser

QUEUE = "per_key"


@dataclass
class Tenant:
    tenant: str
    seq: int


def _client(url: str) -> awa.AsyncClient:
    client = awa.AsyncClient(url, max_connections=8)

    @client.task(Tenant, queue=QUEUE)
    async def _work(job: awa.Job[Tenant]) -> None:
        await asyncio.sleep(random.uniform(0, 0.02))

    return client


async def _setup(url: str, jobs: int, keys: int) -> None:
    client = _client(url)
    try:
        await client.migrate()
        await client.pause_queue(QUEUE)
        for first in range(0, jobs, 2000):
            batch = range(first, min(jobs, first + 2000))
            await client.insert_many_copy(
                [Tenant(f"tenant-{i % keys}", i) for i in batch],
                queue=QUEUE,
                opts=[{"concurrency_key": f"tenant-{i % keys}"} for i in batch],
            )
    finally:
        await client.close()


async def _serve(url: str, limit: int, ready: Event, stop: Event) -> None:
    client = _client(url)
    await client.start(
        [{"name": QUEUE, "max_workers": 32, "max_running_per_key": limit}],
        heartbeat_interval_ms=500,
        heartbeat_staleness_ms=3000,
        heartbeat_rescue_interval_ms=1000,
    )
    ready.set()
    while not stop.is_set():
        await asyncio.sleep(0.1)
    await client.shutdown()
    await client.close()


def _worker(url: str, limit: int, ready: Event, stop: Event) -> None:
    asyncio.run(_serve(url, limit, ready, stop))


SAMPLE = """
SELECT coalesce(max(n), 0) FROM (
    SELECT count(*) AS n FROM awa.jobs
    WHERE queue = %s AND state IN ('running', 'waiting_external')
    GROUP BY metadata ->> 'awa:concurrency_key') k
"""
LEFT = "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state <> 'completed'"
DONE = "SELECT count(*), count(DISTINCT id) FROM awa.jobs WHERE queue = %s AND state = 'completed'"


def run(admin_url: str, name: str, processes: int, jobs: int, keys: int, limit: int) -> None:
    url = fresh_database(admin_url, name)
    ctx = multiprocessing.get_context("spawn")
    asyncio.run(_setup(url, jobs, keys))
    stop = ctx.Event()
    workers = []
    try:
        for _ in range(processes):
            ready = ctx.Event()
            proc = ctx.Process(target=_worker, args=(url, limit, ready, stop))
            proc.start()
            workers.append((proc, ready))
        for _proc, ready in workers:
            if not ready.wait(120):
                raise SystemExit("a worker process did not start within 120 s")
        worst, samples, killed = 0, 0, False
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE awa.queue_meta SET paused = false WHERE queue = %s", (QUEUE,))
            started = time.monotonic()
            while True:
                row = conn.execute(SAMPLE, (QUEUE,)).fetchone()
                worst = max(worst, int(row[0]) if row else 0)
                samples += 1
                if samples % 50 == 0:
                    left_row = conn.execute(LEFT, (QUEUE,)).fetchone()
                    left = int(left_row[0]) if left_row else 0
                    if not killed and left <= jobs // 2:
                        os.kill(workers[0][0].pid or 0, signal.SIGKILL)
                        killed = True
                        print(f"SIGKILL to one worker with {left} jobs left", flush=True)
                    if left == 0:
                        break
                time.sleep(0.01)
            elapsed = time.monotonic() - started
            done = conn.execute(DONE, (QUEUE,)).fetchone()
        print(
            f"{processes} processes, {keys} keys, limit {limit}, {jobs} jobs: "
            f"most running for one key {worst} over {samples} samples in {elapsed:.1f} s; "
            f"completed {done[0] if done else 0} ({done[1] if done else 0} distinct), "
            f"{'none lost' if done and done[1] == jobs else 'LOST JOBS'}",
            flush=True,
        )
    finally:
        stop.set()
        for proc, _ in workers:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        drop_database(admin_url, name)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--limit", type=int, default=2)
    a = p.parse_args()
    run(a.admin_url, a.db or "awa_bench_per_key_probe", a.processes, a.jobs, a.keys, a.limit)


if __name__ == "__main__":
    main()
