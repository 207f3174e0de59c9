"""Latency of every read endpoint of ``awa serve`` while a worker drains a backlog.

Enqueues ``--jobs`` no-op jobs (30,000 by default) into a scratch database, starts
``awa serve`` as its own process (``--cache-ttl`` as given, 5 s by default), then starts
one worker in this process and, from a thread, requests every read endpoint (the REST
API's and the pages', with a second job page by cursor, a DLQ entry and a batch operation
that exist) in turn with ``--pollers`` concurrent pollers until the queue is empty. Prints
p50 / p95 / p99 / max per endpoint (target: p95 under 100 ms), the reads over target and
the drain rate. ``--cache-ttl 0`` shows the uncached cost of each read.

    .venv/bin/python -m benchmarks.serve_reads
    .venv/bin/python -m benchmarks.serve_reads --cache-ttl 0 --jobs 30000
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx

import awa
from benchmarks._common import drop_database, fresh_database, parser, percentile
from benchmarks.drain import QUEUE, BenchNoop, _pending, enqueue_backlog

#: Queue of the one job this benchmark moves into the DLQ (so DLQ reads find a row).
DLQ_QUEUE = "bench_dead"


def endpoints(jobs: int, dlq_id: int, op_id: str) -> list[str]:
    """Every read the REST API and the pages serve, with ids that exist: the second page
    of jobs (``before_id`` in the middle of the backlog), the moved DLQ entry and a batch
    operation."""
    middle = max(2, jobs // 2)
    api = [
        "/api/capabilities",
        "/api/stats",
        "/api/stats/timeseries?minutes=60",
        "/api/stats/kinds",
        "/api/stats/queues",
        "/api/queues",
        f"/api/queues/{QUEUE}",
        "/api/queues/runtime",
        "/api/kinds",
        "/api/jobs?limit=50",
        f"/api/jobs?limit=50&before_id={middle}",
        "/api/jobs?state=completed&limit=50",
        "/api/jobs?state=available&limit=50",
        f"/api/jobs?queue={QUEUE}&limit=50",
        "/api/jobs/1",
        f"/api/jobs/{dlq_id}",
        "/api/dlq?limit=50",
        "/api/dlq/depth",
        f"/api/dlq/{dlq_id}",
        "/api/cron",
        "/api/batch-ops",
        f"/api/batch-ops/{op_id}",
        "/api/runtime",
        "/api/storage",
    ]
    pages = [
        "/",
        "/jobs",
        f"/jobs?before_id={middle}",
        "/jobs?state=completed",
        "/jobs/1",
        "/queues",
        f"/queues/{QUEUE}",
        "/kinds",
        "/cron",
        "/dlq",
        f"/dlq/{dlq_id}",
        "/batch-ops",
        "/runtime",
    ]
    return api + pages


async def dead_letter_and_batch_op(url: str, admin_port: int) -> tuple[int, str]:
    """One job in the DLQ (failed through the engine, then moved) and one batch
    operation that matches nothing, so their reads return rows."""
    async with awa.AsyncClient(url, max_connections=4) as client:
        job = await client.insert(BenchNoop(seq=-1, t=0.0), queue=DLQ_QUEUE, max_attempts=1)
        engine = await client.admin_engine()
        (claim,) = await engine.claim(DLQ_QUEUE, limit=1)
        await engine.fail(claim.lease, error="benchmark: dead on arrival")
        if await client.move_failed_to_dlq(job.id, "manual") is None:
            raise RuntimeError("the benchmark's failed job did not move into the DLQ")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{admin_port}") as http:
        op = await http.post(
            "/api/batch-ops",
            json={
                "op_kind": "set_priority",
                "spec": {"priority": 1},
                "filter": {"queue": "bench_nowhere"},
            },
        )
        op.raise_for_status()
    return job.id, str(op.json()["id"])


#: The p95 each read should stay under during the drain.
TARGET_P95_MS = 100.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(url: str, port: int, cache_ttl: float) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "awa", "--database-url", url, "serve"]
    command += ["--port", str(port), "--cache-ttl", str(cache_ttl)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/capabilities").status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(
        f"awa serve did not start: {server.stderr.read() if server.stderr else ''!r}"
    )


def poll(
    base: str,
    paths: list[str],
    stop: threading.Event,
    samples: dict[str, list[float]],
    offset: int,
) -> None:
    with httpx.Client(base_url=base, timeout=30) as http:
        index = offset
        while not stop.is_set():
            path = paths[index % len(paths)]
            index += 1
            started = time.perf_counter()
            response = http.get(path)
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"{path}: {response.status_code} {response.text}")
            samples[path].append(elapsed * 1000)


async def drain(url: str, workers: int, batch: int) -> float:
    client = awa.AsyncClient(url, max_connections=workers + 4)

    @client.task(BenchNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    started = time.perf_counter()
    await client.start(
        [{"name": QUEUE, "max_workers": workers, "claim_batch_size": batch}], poll_interval_ms=50
    )
    while await _pending(client) > 0:
        await asyncio.sleep(0.2)
    elapsed = time.perf_counter() - started
    await client.shutdown(timeout_ms=10_000)
    await client.close()
    return elapsed


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=30_000)
    p.add_argument("--cache-ttl", type=float, default=5.0)
    p.add_argument("--pollers", type=int, default=4, help="concurrent polling clients")
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    name = args.db or f"awa_bench_serve_{os.getpid()}"
    url = fresh_database(args.admin_url, name)
    server = None
    try:
        asyncio.run(enqueue_backlog(url, args.jobs))
        port = _free_port()
        server = start_server(url, port, args.cache_ttl)
        dlq_id, op_id = asyncio.run(dead_letter_and_batch_op(url, port))
        paths = endpoints(args.jobs, dlq_id, op_id)
        samples: dict[str, list[float]] = defaultdict(list)
        stop = threading.Event()
        with ThreadPoolExecutor(args.pollers) as pool:
            futures = [
                pool.submit(poll, f"http://127.0.0.1:{port}", paths, stop, samples, i * 7)
                for i in range(args.pollers)
            ]
            try:
                elapsed = asyncio.run(drain(url, args.workers, args.batch))
            finally:
                stop.set()
            for future in futures:
                future.result()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
        drop_database(args.admin_url, name)
    load = os.getloadavg()
    print(f"drained {args.jobs} jobs in {elapsed:.1f} s ({args.jobs / elapsed:,.0f} jobs/s)")
    print(f"cache TTL {args.cache_ttl} s, {args.pollers} pollers, load average {load[0]:.1f}")
    width = max(len(path) for path in paths)
    print(f"{'endpoint':{width}} {'n':>5} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}  ms")
    worst, over = 0.0, []
    for path in paths:
        values = samples[path]
        p95 = percentile(values, 0.95)
        worst = max(worst, p95)
        if p95 >= TARGET_P95_MS:
            over.append(path)
        print(
            f"{path:{width}} {len(values):>5} {percentile(values, 0.5):>7.1f} {p95:>7.1f} "
            f"{percentile(values, 0.99):>7.1f} {max(values, default=float('nan')):>7.1f}"
        )
    print(f"worst p95: {worst:.1f} ms (target < {TARGET_P95_MS:.0f} ms)")
    print(f"over target: {', '.join(over) if over else 'none'}")


if __name__ == "__main__":
    main()
