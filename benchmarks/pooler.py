"""What a transaction-mode pooler costs, and what keeping nothing in a session costs
(ADR 0015).

Starts a PgBouncer (``pool_mode = transaction``, ``default_pool_size`` ``--pool-size``) in
front of ``--admin-url``'s server (``tests/support/pgbouncer.py``; needs ``pgbouncer``
installed) and measures, on one scratch database:

- opening a dedicated connection: declared ``direct`` (no detection, the timezone in the
  startup packet) against ``auto`` (one ``pg_backend_pid()`` round trip, then ``SET TIME
  ZONE`` on a direct connection), median of ``--connects``;
- ``insert()`` one by one (``--jobs``): directly with prepared statements (``auto``),
  directly with nothing prepared (the URL declared ``transaction``: the cost of the
  pooled mode alone) and through the pooler;
- the drain of ``--drain`` pre-enqueued no-op jobs by one worker (64 slots), directly and
  through the pooler.

    .venv/bin/python -m benchmarks.pooler --jobs 2000 --drain 5000
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import awa
from awa.adapters._pg import pool as pg_pool
from benchmarks._common import drop_database, fresh_database, parser
from benchmarks.enqueue_bulk import activate
from tests.support.pgbouncer import PgBouncer, pgbouncer_path

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int


async def connect_ms(url: str, mode: str, count: int) -> float:
    pg_pool.declare_pooler(url, mode)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn = await pg_pool.connect(url)
            times.append(time.perf_counter() - started)
            await conn.close()
    finally:
        pg_pool.declare_pooler(url, "auto")
    return statistics.median(times) * 1000


async def inserts_per_second(url: str, jobs: int, pooler: str = "auto") -> float:
    async with awa.AsyncClient(url, max_connections=5, pooler=pooler) as client:
        await client.insert(BenchNoop(-1), queue=QUEUE)
        started = time.perf_counter()
        for i in range(jobs):
            await client.insert(BenchNoop(i), queue=QUEUE)
        elapsed = time.perf_counter() - started
    pg_pool.declare_pooler(url, "auto")
    return jobs / elapsed


async def drain_per_second(url: str, jobs: int) -> float:
    async with awa.AsyncClient(url, max_connections=12) as client:
        done = asyncio.Event()
        count = 0

        @client.task(BenchNoop, queue=QUEUE)
        async def noop(job: awa.Job[BenchNoop]) -> None:
            nonlocal count
            count += 1
            if count >= jobs:
                done.set()

        await client.insert_many_copy([BenchNoop(i) for i in range(jobs)], queue=QUEUE)
        # The clock starts once start() returned: through the pooler it waits up to 2 s
        # for the wake-up probe, which is not the drain's cost.
        await client.start(
            [{"name": QUEUE, "max_workers": 64, "claim_batch_size": 512}], poll_interval_ms=50
        )
        started = time.perf_counter()
        try:
            await asyncio.wait_for(done.wait(), 600)
            elapsed = time.perf_counter() - started
        finally:
            await client.shutdown()
    return jobs / elapsed


async def run(url: str, pooled: str, connects: int, jobs: int, drain: int) -> None:
    await activate(url)
    direct_ms = await connect_ms(url, "direct", connects)
    auto_ms = await connect_ms(url, "auto", connects)
    pooled_ms = await connect_ms(pooled, "auto", connects)
    print(
        f"connect (median of {connects}): declared direct {direct_ms:.2f} ms, "
        f"auto on a direct server {auto_ms:.2f} ms, auto through the pooler {pooled_ms:.2f} ms",
        flush=True,
    )
    for label, target, mode in (
        ("direct, prepared", url, "auto"),
        ("direct, nothing prepared", url, "transaction"),
        ("through the pooler", pooled, "auto"),
    ):
        rate = await inserts_per_second(target, jobs, mode)
        print(f"insert 1-by-1, {label}: {rate:.0f}/s", flush=True)
    for label, target in (("direct", url), ("through the pooler", pooled)):
        rate = await drain_per_second(target, drain)
        print(f"drain {drain}, {label}: {rate:.0f} jobs/s", flush=True)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connects", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--drain", type=int, default=5000)
    p.add_argument("--pool-size", type=int, default=8)
    a = p.parse_args()
    executable = pgbouncer_path()
    if executable is None:
        raise SystemExit("pgbouncer is not installed (apt-get install pgbouncer)")
    name = a.db or "awa_bench_pooler"
    url = fresh_database(a.admin_url, name)
    bouncer = PgBouncer(executable, a.admin_url, pool_size=a.pool_size)
    try:
        bouncer.start()
        asyncio.run(run(url, bouncer.url(url), a.connects, a.jobs, a.drain))
    finally:
        bouncer.close()
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
