"""Drain throughput of one worker process, mirroring the shared harness's drain phase.

Pre-enqueues ``--jobs`` no-op jobs, starts one ``AsyncClient`` worker with
``[{name, max_workers, claim_batch_size}]`` and stops the clock when ``queue_stats()``
reports nothing pending (durably completed, as the harness checks).

    .venv/bin/python -m benchmarks.drain --jobs 10000
    .venv/bin/python -m benchmarks.drain --jobs 10000 --profile pyinstrument
    py-spy record -o /tmp/drain.svg -- .venv/bin/python -m benchmarks.drain --jobs 30000
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa
from benchmarks._common import (
    CpuMeter,
    drop_database,
    fresh_database,
    maybe_profile,
    parser,
    report,
)

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int
    t: float


async def _pending(stats: awa.AsyncClient) -> int:
    for s in await stats.queue_stats():
        if s.queue == QUEUE:
            return int(s.available + s.running + s.retryable + s.scheduled + s.waiting_external)
    return 0


async def enqueue_backlog(url: str, jobs: int) -> None:
    """Migrate, start and stop one worker (a first deployment activates the default
    storage engine), then enqueue ``jobs`` no-op jobs in COPY batches of 5,000."""
    # One queue's worker: queues + 4 connections, as the configuration check asks.
    setup = awa.AsyncClient(url, max_connections=5)
    await setup.migrate()

    @setup.task(BenchNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    await setup.start([(QUEUE, 1)], poll_interval_ms=50)
    await setup.shutdown(timeout_ms=5000)
    for start in range(0, jobs, 5000):
        await setup.enqueue_many_copy(
            [BenchNoop(seq=i, t=0.0) for i in range(start, min(jobs, start + 5000))], queue=QUEUE
        )
    await setup.close()


async def drain(
    url: str,
    jobs: int,
    slots: int,
    batch: int,
    profile: str = "",
    meter: CpuMeter | None = None,
) -> float:
    """One worker drains the backlog; the clock stops when ``queue_stats()`` shows
    nothing pending. Prints and returns jobs/s."""
    client = awa.AsyncClient(url, max_connections=20)
    stats = awa.AsyncClient(url, max_connections=2)
    done = 0
    all_done = asyncio.Event()

    @client.task(BenchNoop, queue=QUEUE)
    async def handle(job: object) -> None:
        nonlocal done
        done += 1
        if done >= jobs:
            all_done.set()

    if meter is not None:
        meter.start()
    with maybe_profile(profile):
        started = time.perf_counter()
        await client.start(
            [{"name": QUEUE, "max_workers": slots, "claim_batch_size": batch}],
            poll_interval_ms=50,
        )
        await all_done.wait()
        while await _pending(stats) > 0:
            await asyncio.sleep(0.02)
        rate = report("drain", jobs, started, slots=slots, claim_batch_size=batch)
    if meter is not None:
        worker_cpu, pg_cpu = meter.stop()
        print(
            f"cpu: worker {worker_cpu:.2f} s ({1e6 * worker_cpu / jobs:.0f} us/job), "
            f"postgres backends {pg_cpu:.2f} s ({1e6 * pg_cpu / jobs:.0f} us/job)",
            flush=True,
        )
    await client.shutdown(timeout_ms=10000)
    await client.close()
    await stats.close()
    return rate


async def run(
    url: str, jobs: int, slots: int, batch: int, profile: str, meter: CpuMeter | None = None
) -> float:
    await enqueue_backlog(url, jobs)
    return await drain(url, jobs, slots, batch, profile, meter)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--claim-batch-size", type=int, default=512)
    a = p.parse_args()
    name = a.db or "awa_bench_drain"
    url = fresh_database(a.admin_url, name)
    try:
        meter = CpuMeter(a.admin_url, name)
        asyncio.run(run(url, a.jobs, a.slots, a.claim_batch_size, a.profile, meter))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
