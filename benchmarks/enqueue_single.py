"""Single-job enqueue through ``AsyncClient.insert``: one producer in sequence (the
harness's "enqueue 1-by-1") and ``--producers`` concurrent producers sharing one client
(each insert is its own transaction).

    .venv/bin/python -m benchmarks.enqueue_single --jobs 3000 --producers 8
    .venv/bin/python -m benchmarks.enqueue_single --jobs 3000 --profile pyinstrument
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser, report
from benchmarks.enqueue_bulk import activate

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int
    t: float


async def run(url: str, jobs: int, producers: int, profile: str) -> None:
    await activate(url)
    client = awa.AsyncClient(url, max_connections=max(4, producers + 2))
    try:
        await client.insert(BenchNoop(seq=-1, t=0.0), queue=QUEUE)  # warm the pool
        with maybe_profile(profile):
            started = time.perf_counter()
            for i in range(jobs):
                await client.insert(BenchNoop(seq=i, t=time.time()), queue=QUEUE)
            report("single, 1 producer", jobs, started)
        if producers > 1:
            counter = iter(range(jobs))

            async def producer() -> None:
                for i in counter:
                    await client.insert(BenchNoop(seq=i, t=time.time()), queue=QUEUE)

            with maybe_profile(profile):
                started = time.perf_counter()
                await asyncio.gather(*(producer() for _ in range(producers)))
                report(f"single, {producers} producers", jobs, started)
    finally:
        await client.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--producers", type=int, default=8)
    a = p.parse_args()
    name = a.db or "awa_bench_single"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.producers, a.profile))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
