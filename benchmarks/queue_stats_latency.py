"""``queue_counts()`` latency on the queue-storage engine while a backlog is drained.

Installs the engine into a scratch schema, enqueues ``--jobs`` jobs (binary COPY, chunks of
5,000), then runs ``--workers`` concurrent claim + complete loops until the queue is empty
while a sampler calls ``engine.queue_counts()`` back to back on its own connection. Prints
the latency distribution (target: p99 under 50 ms) and the drain rate.

    .venv/bin/python benchmarks/queue_stats_latency.py postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.adapters.postgres_queue_storage.connections import PgUnitOfWork
from awa.domain.job import JobSpec
from awa.domain.states import JobState

SCHEMA = "qs_stats_bench"
QUEUE = "stats"


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(url: str, jobs: int, workers: int, batch: int, shards: int) -> None:
    await install_queue_storage(url, SCHEMA, reset=True)
    engine = await QueueStorageEngine.open(
        url, clock=SystemClock(), schema=SCHEMA, max_connections=workers + 2
    )
    latencies: list[float] = []
    done = 0
    try:
        # Several lanes, so concurrent claimers take disjoint claim heads.
        async with engine.transaction() as uow:
            assert isinstance(uow, PgUnitOfWork)
            await uow.conn.execute(
                "INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES (%s, %s) "
                "ON CONFLICT (queue) DO UPDATE SET enqueue_shards = EXCLUDED.enqueue_shards",
                (QUEUE, shards),
            )
        for start in range(0, jobs, 5_000):
            size = min(5_000, jobs - start)
            await engine.enqueue_many_copy([JobSpec(kind="noop", queue=QUEUE)] * size)
        draining = True

        async def worker() -> None:
            nonlocal done
            while done < jobs:
                claims = await engine.claim(QUEUE, limit=batch)
                if not claims:
                    # Another worker holds the lane's claim head (SKIP LOCKED): try again.
                    await anyio.sleep(0.001)
                    continue
                await engine.complete([claim.lease for claim in claims])
                done += len(claims)

        async def sampler() -> None:
            while draining:
                started = time.perf_counter()
                counts = await engine.queue_counts()
                latencies.append(time.perf_counter() - started)
                assert any(c.queue == QUEUE for c in counts)

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            group.start_soon(sampler)
            async with anyio.create_task_group() as drain:
                for _ in range(workers):
                    drain.start_soon(worker)
            draining = False
        elapsed = time.perf_counter() - started
        final = next(c for c in await engine.queue_counts() if c.queue == QUEUE)
    finally:
        await engine.close()
    ms = [value * 1000 for value in latencies]
    print(
        f"jobs drained:          {done} by {workers} workers (claim batch {batch}, {shards} shards)"
    )
    print(f"drain:                 {elapsed:.1f} s ({done / elapsed:,.0f} jobs/s)")
    print(f"queue_counts samples:  {len(ms)}")
    print(
        f"latency ms:            p50 {statistics.median(ms):.1f}  p95 {_percentile(ms, 0.95):.1f}"
        f"  p99 {_percentile(ms, 0.99):.1f}  max {max(ms):.1f}"
    )
    print(
        f"final counts:          completed {final.counts[JobState.Completed]}, "
        f"completed_last_hour {final.completed_last_hour}, "
        f"available {final.counts[JobState.Available]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="database URL (the benchmark uses schema qs_stats_bench)")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--shards", type=int, default=4, help="enqueue shards of the queue")
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    anyio.run(run, args.url, args.jobs, args.workers, args.batch, args.shards)


if __name__ == "__main__":
    main()
