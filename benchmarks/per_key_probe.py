"""Per-key concurrency across a fleet, probed from outside (issue 43's invariant probe):
``--processes`` worker processes (default 4) serve one queue with
``"max_running_per_key": --limit`` (default 2) over ``--jobs`` jobs (default 50,000) spread
over ``--keys`` concurrency keys (default 200), each handler sleeping a random 0-20 ms.
Halfway through the drain one worker is killed with SIGKILL, and its attempts come back
through the heartbeat rescue. Printed: the most running at once for any key over every
sample, how many samples were taken and how far apart, and whether none was lost: the
drain ends when ``awa.jobs`` shows no job of the queue not completed, and every job's
handler ran to its end (``probe_done``; a job run again after the rescue counts twice).

Two samplers, both plain SQL (no ``pg_stat_activity``):

* every ``--sample-ms`` (default 10 ms, on a fixed schedule): the handlers running per
  key, from a table each handler writes as it starts and deletes from as it returns
  (``probe_running``; the killed worker's rows are left out once it is killed). A
  handler runs only inside its attempt, so this never counts more than the engine holds;
  the read is of a table of at most a few hundred rows, so it keeps to the schedule;
* every ``--view-every`` samples (default 25, ~0.25 s): the attempts ``awa.jobs`` shows
  ``running`` or ``waiting_external`` per key (the public view; its read grows with the
  jobs the run completed, so it cannot keep a 10 ms schedule itself).

At the default size the drain takes about 1-3 minutes on a quiet 2-core host (about
400 jobs/s were seen at 5,000 jobs on a busy one), plus a minute or two to set up.

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
from psycopg_pool import AsyncConnectionPool

import awa
from benchmarks._common import drop_database, fresh_database, parser

QUEUE = "per_key"


@dataclass
class Tenant:
    tenant: str
    seq: int


RUNNING_TABLE = """
CREATE UNLOGGED TABLE IF NOT EXISTS probe_running (
    job_id bigint NOT NULL, key text NOT NULL, pid int NOT NULL)
"""
#: Every handler that ran to its end, by job id (a job run again after a rescue is here
#: twice). Lost jobs are counted from here, not from ``awa.jobs``: queue storage keeps a
#: completed job only until the ring reclaims its slot, so a long run's early completions
#: are gone from the view by its end.
DONE_TABLE = "CREATE TABLE IF NOT EXISTS probe_done (job_id bigint NOT NULL)"
STARTED = "INSERT INTO probe_running (job_id, key, pid) VALUES (%s, %s, %s)"
RETURNED = "DELETE FROM probe_running WHERE job_id = %s AND pid = %s"
FINISHED = "INSERT INTO probe_done (job_id) VALUES (%s)"


def _client(url: str, ledger: AsyncConnectionPool | None = None) -> awa.AsyncClient:
    client = awa.AsyncClient(url, max_connections=8)
    pid = os.getpid()

    @client.task(Tenant, queue=QUEUE)
    async def _work(job: awa.Job[Tenant]) -> None:
        if ledger is None:
            await asyncio.sleep(random.uniform(0, 0.02))
            return
        async with ledger.connection() as conn:
            await conn.execute(STARTED, (job.id, job.args.tenant, pid))
        finished = False
        try:
            await asyncio.sleep(random.uniform(0, 0.02))
            finished = True
        finally:
            async with ledger.connection() as conn:
                await conn.execute(RETURNED, (job.id, pid))
                if finished:
                    await conn.execute(FINISHED, (job.id,))

    return client


async def _setup(url: str, jobs: int, keys: int) -> None:
    client = _client(url)
    try:
        await client.migrate()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(RUNNING_TABLE)
            await conn.execute(DONE_TABLE)
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
    ledger = AsyncConnectionPool(
        url, min_size=2, max_size=8, kwargs={"autocommit": True}, open=False
    )
    await ledger.open()
    client = _client(url, ledger)
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
    await ledger.close()


def _worker(url: str, limit: int, ready: Event, stop: Event) -> None:
    asyncio.run(_serve(url, limit, ready, stop))


SAMPLE_HANDLERS = """
SELECT coalesce(max(n), 0) FROM (
    SELECT count(*) AS n FROM probe_running WHERE pid <> ALL(%s) GROUP BY key) k
"""
SAMPLE_VIEW = """
SELECT coalesce(max(n), 0) FROM (
    SELECT count(*) AS n FROM awa.jobs
    WHERE queue = %s AND state IN ('running', 'waiting_external')
    GROUP BY metadata ->> 'awa:concurrency_key') k
"""
LEFT = "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state <> 'completed'"
DONE = "SELECT count(*), count(DISTINCT job_id) FROM probe_done"


def run(
    admin_url: str,
    name: str,
    processes: int,
    jobs: int,
    keys: int,
    limit: int,
    sample_ms: float = 10.0,
    view_every: int = 25,
) -> None:
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
        worst, worst_view, samples, view_samples, killed = 0, 0, 0, 0, False
        dead: list[int] = []
        late = 0
        tick = sample_ms / 1000
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE awa.queue_meta SET paused = false WHERE queue = %s", (QUEUE,))
            started = time.monotonic()
            due = started
            while True:
                row = conn.execute(SAMPLE_HANDLERS, (dead,)).fetchone()
                worst = max(worst, int(row[0]) if row else 0)
                samples += 1
                if samples % view_every == 0:
                    row = conn.execute(SAMPLE_VIEW, (QUEUE,)).fetchone()
                    worst_view = max(worst_view, int(row[0]) if row else 0)
                    view_samples += 1
                    left_row = conn.execute(LEFT, (QUEUE,)).fetchone()
                    left = int(left_row[0]) if left_row else 0
                    if not killed and left <= jobs // 2:
                        victim = workers[0][0].pid or 0
                        os.kill(victim, signal.SIGKILL)
                        dead.append(victim)
                        killed = True
                        print(f"SIGKILL to one worker with {left} jobs left", flush=True)
                    if left == 0:
                        break
                due += tick
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                else:
                    # Behind schedule: sample now, and count it.
                    late += 1
                    due = time.monotonic()
            elapsed = time.monotonic() - started
            done = conn.execute(DONE).fetchone()
        print(
            f"{processes} processes, {keys} keys, limit {limit}, {jobs} jobs: "
            f"most handlers running for one key {worst} over {samples} samples in "
            f"{elapsed:.1f} s (one per {1000 * elapsed / max(samples, 1):.1f} ms, {late} late); "
            f"most running for one key in awa.jobs {worst_view} over {view_samples} samples; "
            f"none left in awa.jobs; handlers run to their end {done[0] if done else 0} "
            f"({done[1] if done else 0} distinct jobs), "
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
    p.add_argument("--sample-ms", type=float, default=10.0, help="the handler sampler's period")
    p.add_argument(
        "--view-every", type=int, default=25, help="read awa.jobs every this many samples"
    )
    a = p.parse_args()
    run(
        a.admin_url,
        a.db or "awa_bench_per_key_probe",
        a.processes,
        a.jobs,
        a.keys,
        a.limit,
        a.sample_ms,
        a.view_every,
    )


if __name__ == "__main__":
    main()
