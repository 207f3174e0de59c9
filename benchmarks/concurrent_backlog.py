"""A backlog written by concurrent producers against the same backlog from one producer.

For each ``--jobs`` size, twice on a fresh database: ``--producers`` producer processes
(or one) write the backlog with no worker running, mixing ``insert()``,
``insert_many_copy()`` and ``enqueue_many_copy()`` (per round of 500 jobs: 20 inserts, a
copy insert of 80 and a COPY of 400); then ``awa worker -p 2`` and a second ``awa worker``
(three worker processes) drain it. The queue is paused while the workers start, and the
clock runs from its resume until ``queue_stats()`` shows nothing pending. Printed per
run: enqueue rate, drain rate, the lanes whose unclaimed window is disordered (the
claims must sort it) after the backlog was written, and the ratio of the concurrent drain
to the one-producer drain.

    .venv/bin/python -m benchmarks.concurrent_backlog --jobs 30000
    .venv/bin/python -m benchmarks.concurrent_backlog --jobs 30000,200000
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

import awa
from benchmarks._common import drop_database, fresh_database, parser, report

QUEUE = "backlog"
#: One producer round: single inserts, one insert_many_copy, one enqueue_many_copy.
ROUND_INSERTS = 20
ROUND_COPY_INSERT = 80
ROUND_COPY = 400
ROUND = ROUND_INSERTS + ROUND_COPY_INSERT + ROUND_COPY
#: The worker module ``awa worker -m`` loads (handlers of this benchmark's jobs).
WORKER_MODULE = "benchmarks._backlog_worker"


@dataclass
class BacklogNoop:
    seq: int


async def _setup(url: str) -> None:
    """Migrate and activate the default storage engine (a first worker start does)."""
    setup = awa.AsyncClient(url, max_connections=5)
    await setup.migrate()

    @setup.task(BacklogNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    await setup.start([(QUEUE, 1)], poll_interval_ms=50)
    await setup.shutdown(timeout_ms=5000)
    await setup.close()


async def _produce(url: str, first: int, count: int) -> None:
    client = awa.AsyncClient(url, max_connections=5)
    seq = first
    end = first + count
    try:
        while seq < end:
            for _ in range(min(ROUND_INSERTS, end - seq)):
                await client.insert(BacklogNoop(seq=seq), queue=QUEUE)
                seq += 1
            n = min(ROUND_COPY_INSERT, end - seq)
            if n > 0:
                await client.insert_many_copy(
                    [BacklogNoop(seq=s) for s in range(seq, seq + n)], queue=QUEUE
                )
                seq += n
            n = min(ROUND_COPY, end - seq)
            if n > 0:
                await client.enqueue_many_copy(
                    [BacklogNoop(seq=s) for s in range(seq, seq + n)], queue=QUEUE
                )
                seq += n
    finally:
        await client.close()


def _producer_process(url: str, first: int, count: int) -> None:
    asyncio.run(_produce(url, first, count))


def write_backlog(url: str, jobs: int, producers: int) -> float:
    """``producers`` processes write ``jobs`` jobs between them; returns jobs/s."""
    share = [jobs // producers + (1 if i < jobs % producers else 0) for i in range(producers)]
    ctx = multiprocessing.get_context("spawn")
    procs = []
    first = 0
    started = time.perf_counter()
    for count in share:
        proc = ctx.Process(target=_producer_process, args=(url, first, count))
        proc.start()
        procs.append(proc)
        first += count
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a producer exited with {proc.exitcode}")
    return report(f"enqueue ({producers} producer{'s' if producers > 1 else ''})", jobs, started)


def disordered_lanes(url: str) -> tuple[int, int]:
    """(disordered lanes, lanes) of the queue: a disordered lane's claims sort its window."""
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'lanes' AND c.relkind = 'r'"
        ).fetchone()
        assert found is not None, "no queue-storage schema"
        schema = sql.Identifier(found[0])
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE l.disorder_seq >= h.claim_seq), count(*) "
                "FROM {s}.lanes l JOIN {s}.claim_heads h USING (queue, priority, shard) "
                "WHERE l.queue LIKE %s"
            ).format(s=schema),
            (QUEUE + "%",),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


async def _pending(client: awa.AsyncClient) -> int:
    for s in await client.queue_stats():
        if s.queue == QUEUE:
            return int(s.available + s.running + s.retryable + s.scheduled + s.waiting_external)
    return 0


def _start_workers(url: str, slots: int, log: Path) -> list[tuple[subprocess.Popen[bytes], int]]:
    """``awa worker -p 2`` and a second ``awa worker``: three worker processes."""
    awa_bin = str(Path(sys.executable).with_name("awa"))
    env = dict(os.environ, DATABASE_URL=url)
    started = []
    for processes in (2, 1):
        port = _free_port() if processes == 1 else 0
        cmd = [awa_bin, "worker", "-m", WORKER_MODULE, "-q", f"{QUEUE}:{slots}"]
        cmd += ["-p", str(processes), "--log-level", "warning"]
        if port:
            cmd += ["--health-addr", f"127.0.0.1:{port}"]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        started.append((proc, port))
    return started


async def drain(url: str, jobs: int, slots: int, log: Path) -> float:
    """Pause the queue, start the three worker processes, resume, and time the drain."""
    client = awa.AsyncClient(url, max_connections=2)
    await client.pause_queue(QUEUE)
    workers = _start_workers(url, slots, log)
    try:
        # Readiness of the single-process worker; the supervised pair starts alongside.
        deadline = time.monotonic() + 60
        while not any(port and _ready(port) for _, port in workers):
            if time.monotonic() > deadline:
                raise SystemExit(f"workers did not become ready; see {log}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # the supervised pair's two children start their runtimes
        started = time.perf_counter()
        await client.resume_queue(QUEUE)
        while await _pending(client) > 0:
            await asyncio.sleep(0.05)
        rate = report("drain (3 worker processes)", jobs, started)
    finally:
        for proc, _ in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in workers:
            _stop_group(proc)
        await client.close()
    return rate


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Wait for ``proc`` and every process of its group (a supervisor's children) to exit
    after SIGTERM, then SIGKILL what is left: the scratch database is dropped next."""
    deadline = time.monotonic() + 30
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def one_run(admin_url: str, name: str, jobs: int, producers: int, slots: int, log: Path) -> float:
    url = fresh_database(admin_url, name)
    try:
        asyncio.run(_setup(url))
        write_backlog(url, jobs, producers)
        bad, lanes = disordered_lanes(url)
        print(f"lanes with a disordered window: {bad} of {lanes}", flush=True)
        return asyncio.run(drain(url, jobs, slots, log))
    finally:
        drop_database(admin_url, name)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", default="30000", help="comma-separated backlog sizes")
    p.add_argument("--producers", type=int, default=8)
    p.add_argument("--slots", type=int, default=32, help="handler slots per worker process")
    p.add_argument("--log", default="/tmp/awa-concurrent-backlog-workers.log")
    a = p.parse_args()
    name = a.db or "awa_bench_concurrent_backlog"
    log = Path(a.log)
    for jobs in (int(j) for j in a.jobs.split(",")):
        print(f"== {jobs} jobs", flush=True)
        one = one_run(a.admin_url, name, jobs, 1, a.slots, log)
        many = one_run(a.admin_url, name, jobs, a.producers, a.slots, log)
        print(
            f"{jobs} jobs: {a.producers} producers drain at {many:,.0f}/s, one producer at "
            f"{one:,.0f}/s: {many / one:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
