"""How long the leader takes to reclaim a ring slot holding a large keyed backlog while
workers drain it (ADR 0006, "Carry-forward of live rows", *A step at a time*).

Installs queue storage with a ring of 4 slots into a scratch database, puts ``--jobs``
jobs (default 50,000) over ``--keys`` concurrency keys (default 200; 0 for none) into one
slot, turns the ring until that slot is the one prune reclaims, then starts
``--claimers`` claim loops (default 4; ``max_running_per_key`` ``--limit``, each claim
of up to 32 jobs completed after 0-20 ms) and calls prune as the leader's ring duty does
(again at once after ``carried``, 0.1 s later after anything else) until it answers
``pruned`` or ``--seconds`` (default 120) pass. Prints each outcome's count, median and
longest call: every call must stay well inside the leader's lease (a few seconds).

    .venv/bin/python -m benchmarks.prune_backlog
    .venv/bin/python -m benchmarks.prune_backlog --carry-batch 500 --keys 0
"""

from __future__ import annotations

import asyncio
import collections
import random
import time

import awa
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.job import JobSpec
from awa.domain.policies import DEFAULT_CARRY_BATCH, Backoff
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser

SCHEMA = "bench_prune_backlog"
QUEUE = "backlog"


async def run(
    url: str,
    *,
    jobs: int,
    keys: int,
    limit: int,
    claimers: int,
    carry_batch: int,
    seconds: float,
) -> None:
    client = awa.AsyncClient(url)
    await client.migrate()
    await client.close()
    await install_queue_storage(url, SCHEMA, queue_slot_count=4, lease_slot_count=4)
    engine = await QueueStorageEngine.open(
        url, clock=SystemClock(), backoff=Backoff(), schema=SCHEMA
    )
    stop = asyncio.Event()
    completed = 0
    try:
        for first in range(0, jobs, 5000):
            await engine.enqueue_many_copy(
                [
                    JobSpec(
                        kind="k",
                        queue=QUEUE,
                        args={"n": i},
                        metadata={"awa:concurrency_key": f"tenant-{i % keys}"} if keys else {},
                    )
                    for i in range(first, min(jobs, first + 5000))
                ]
            )
        # Two rotations (a completed filler in each slot): the backlog's slot is then the
        # one prune reclaims (current + 2).
        for _ in range(2):
            await engine.enqueue_many([JobSpec(kind="f", queue="filler")])
            (filler,) = await engine.claim("filler", limit=1)
            await engine.complete([filler.lease])
            await engine.rotate_queue_ring()

        async def claim_loop() -> None:
            nonlocal completed
            while not stop.is_set():
                got = await engine.claim(QUEUE, limit=32, max_running_per_key=limit)
                if got:
                    await asyncio.sleep(random.uniform(0, 0.02))
                    await engine.complete([c.lease for c in got])
                    completed += len(got)
                else:
                    await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(claim_loop()) for _ in range(claimers)]
        await asyncio.sleep(2)
        calls: dict[str, list[float]] = collections.defaultdict(list)
        started = time.perf_counter()
        outcome = ""
        while time.perf_counter() - started < seconds:
            t = time.perf_counter()
            outcome = await engine.prune_oldest(carry_batch=carry_batch)
            calls[outcome].append((time.perf_counter() - t) * 1000)
            if outcome == "pruned":
                break
            if outcome != "carried":
                await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - started
        stop.set()
        await asyncio.gather(*tasks)
        print(
            f"{jobs} jobs, {keys} keys, carry batch {carry_batch}, {claimers} claimers: "
            f"{'slot reclaimed' if outcome == 'pruned' else 'SLOT NOT RECLAIMED'} after "
            f"{elapsed:.1f} s; {completed} jobs completed meanwhile",
            flush=True,
        )
        for word, times in sorted(calls.items()):
            times.sort()
            print(
                f"  {word}: {len(times)} calls, median {times[len(times) // 2]:.0f} ms, "
                f"longest {times[-1]:.0f} ms",
                flush=True,
            )
    finally:
        stop.set()
        await engine.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--limit", type=int, default=2)
    p.add_argument("--claimers", type=int, default=4)
    p.add_argument("--carry-batch", type=int, default=DEFAULT_CARRY_BATCH)
    p.add_argument("--seconds", type=float, default=120.0)
    a = p.parse_args()
    name = a.db or "awa_bench_prune_backlog"
    url = fresh_database(a.admin_url, name)
    try:
        with maybe_profile(a.profile):
            asyncio.run(
                run(
                    url,
                    jobs=a.jobs,
                    keys=a.keys,
                    limit=a.limit,
                    claimers=a.claimers,
                    carry_batch=a.carry_batch,
                    seconds=a.seconds,
                )
            )
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
