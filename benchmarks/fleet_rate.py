"""A rate limit across a fleet: how many jobs per second several worker processes start
when each serves the queue with the same ``rate_limit=(max_rate, burst)``.

Issue 43's rate probe: ``--processes`` worker processes (default 4), a limit of
``--rate`` jobs/s (default 50), ``--seconds`` of measurement (default 60). The backlog is
written first (enough for every process to run at the limit throughout), the queue is
paused while the processes start, then resumed; after ``--warmup`` seconds (the buckets'
first bursts) the harness reads the queue's pending count at the start and the end of
the measured window. Printed: the observed fleet rate, its ratio to the limit, and the
rate of each measured second's tenth (to show it steady).

``--limit process`` (the default) gives each process ``rate_limit``, a token bucket in
each process (awa-pg's meaning), so N processes start about N times the limit: the
baseline. ``--limit fleet`` gives the queue ``global_rate_limit``, one limiter in the
database for the whole fleet (ADR 0029), which must hold the fleet at the limit.

    .venv/bin/python -m benchmarks.fleet_rate
    .venv/bin/python -m benchmarks.fleet_rate --limit fleet --processes 4 --rate 50 --seconds 60
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import awa
from benchmarks._common import drop_database, fresh_database, parser

QUEUE = "fleet_rate"
#: Handler slots per worker process: far more than the limit needs, so the bucket is the
#: only brake.
SLOTS = 32


@dataclass
class RateNoop:
    seq: int


def _client(url: str) -> awa.AsyncClient:
    client = awa.AsyncClient(url, max_connections=6)

    @client.task(RateNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    return client


async def _setup(url: str, jobs: int) -> None:
    client = _client(url)
    try:
        await client.migrate()
        await client.pause_queue(QUEUE)
        for first in range(0, jobs, 5000):
            batch = [RateNoop(seq=i) for i in range(first, min(jobs, first + 5000))]
            await client.insert_many_copy(batch, queue=QUEUE)
    finally:
        await client.close()


async def _serve(url: str, limit: str, rate: float, burst: int, ready: Event, stop: Event) -> None:
    client = _client(url)
    queue: awa.QueueConfigDict = {"name": QUEUE, "max_workers": SLOTS}
    if limit == "fleet":
        queue["global_rate_limit"] = (rate, burst)
    else:
        queue["rate_limit"] = (rate, burst)
    await client.start([queue])
    ready.set()
    while not stop.is_set():
        await asyncio.sleep(0.1)
    await client.shutdown()
    await client.close()


def _worker(url: str, limit: str, rate: float, burst: int, ready: Event, stop: Event) -> None:
    asyncio.run(_serve(url, limit, rate, burst, ready, stop))


async def _pending(client: awa.AsyncClient) -> int:
    for s in await client.queue_stats():
        if s.queue == QUEUE:
            return int(s.available + s.running + s.retryable + s.scheduled + s.waiting_external)
    return 0


async def _measure(url: str, warmup: float, seconds: float) -> tuple[float, list[float]]:
    """Resume the queue, wait out the warm-up, then the fleet's rate over ``seconds`` and
    over each tenth of it."""
    client = awa.AsyncClient(url, max_connections=2)
    try:
        await client.resume_queue(QUEUE)
        await asyncio.sleep(warmup)
        marks = [(time.monotonic(), await _pending(client))]
        for _ in range(10):
            await asyncio.sleep(seconds / 10)
            marks.append((time.monotonic(), await _pending(client)))
    finally:
        await client.close()
    (t0, p0), (t1, p1) = marks[0], marks[-1]
    tenths = [(a[1] - b[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(marks)]
    return (p0 - p1) / (t1 - t0), tenths


def run(
    admin_url: str,
    name: str,
    processes: int,
    limit: str,
    rate: float,
    burst: int,
    warmup: float,
    seconds: float,
) -> float:
    url = fresh_database(admin_url, name)
    ctx = multiprocessing.get_context("spawn")
    # Enough for every process at the limit for the whole run, and then some.
    jobs = int(processes * rate * (warmup + seconds) * 1.5) + 1000
    asyncio.run(_setup(url, jobs))
    stop = ctx.Event()
    workers = []
    try:
        for _ in range(processes):
            ready = ctx.Event()
            proc = ctx.Process(target=_worker, args=(url, limit, rate, burst, ready, stop))
            proc.start()
            workers.append((proc, ready))
        for _proc, ready in workers:
            if not ready.wait(120):
                raise SystemExit("a worker process did not start within 120 s")
        observed, tenths = asyncio.run(_measure(url, warmup, seconds))
    finally:
        stop.set()
        for proc, _ in workers:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        drop_database(admin_url, name)
    procs = "1 worker process" if processes == 1 else f"each of {processes} worker processes"
    if limit == "fleet":
        limit_words = f"global_rate_limit=({rate:g}, {burst}) over {processes} worker processes"
    else:
        limit_words = f"rate_limit=({rate:g}, {burst}) in {procs}"
    print(
        f"{limit_words}: fleet rate {observed:,.1f} jobs/s over {seconds:g} s "
        f"= {observed / rate:.2f}x the limit",
        flush=True,
    )
    print("per tenth of the window (jobs/s): " + ", ".join(f"{r:.0f}" for r in tenths))
    return observed


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument(
        "--limit",
        choices=("process", "fleet"),
        default="process",
        help="rate_limit in each process, or one global_rate_limit for the fleet",
    )
    p.add_argument("--rate", type=float, default=50.0, help="max_rate of the limit, jobs/s")
    p.add_argument("--burst", type=int, default=10)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    p.add_argument("--seconds", type=float, default=60.0, help="measured window")
    a = p.parse_args()
    run(
        a.admin_url,
        a.db or "awa_bench_fleet_rate",
        a.processes,
        a.limit,
        a.rate,
        a.burst,
        a.warmup,
        a.seconds,
    )


if __name__ == "__main__":
    main()
