"""Single-job enqueue through ``AsyncClient.insert``: one producer in sequence (the
harness's "enqueue 1-by-1") and ``--producers`` concurrent producers sharing one client
(each insert is its own transaction). Each phase also prints the producer's CPU per
insert and the database's commits and the server's WAL bytes per insert (the WAL is the
whole server's: read it on a quiet server); ``--waits`` samples what the server backends
wait on during the concurrent phase (``pg_stat_activity`` every 20 ms): heavyweight
``Lock:*`` waits there mean producers queue behind each other's locks.

    .venv/bin/python -m benchmarks.enqueue_single --jobs 3000 --producers 8
    .venv/bin/python -m benchmarks.enqueue_single --jobs 3000 --producers 8 --waits
    .venv/bin/python -m benchmarks.enqueue_single --jobs 3000 --profile pyinstrument
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

import awa
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser, report
from benchmarks.enqueue_bulk import activate

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int
    t: float


async def sample_waits(url: str, stop: asyncio.Event) -> Counter[str]:
    """What this database's active backends wait on, sampled until ``stop``."""
    seen: Counter[str] = Counter()
    database = url.rpartition("/")[2]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            cur = await conn.execute(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') "
                "FROM pg_stat_activity WHERE datname = %s AND state = 'active' "
                "AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%%'",
                (database,),
            )
            seen.update(row[0] for row in await cur.fetchall())
            await asyncio.sleep(0.02)
    return seen


def _cpu_per_insert(cpu_started: float, jobs: int) -> str:
    return f"{(time.process_time() - cpu_started) / jobs * 1000:.2f} ms"


async def _commits_and_wal(url: str) -> tuple[int, int]:
    """The database's committed transactions so far and the server's WAL position."""
    database = url.rpartition("/")[2]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn"
            " FROM pg_stat_database WHERE datname = %s",
            (database,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def _per_insert(url: str, before: tuple[int, int], jobs: int) -> str:
    """Commits and WAL bytes per insert since ``before``: read once the phase's client is
    closed, since a backend reports its commits when it exits (or idles a while)."""
    commits, wal = await _commits_and_wal(url)
    return (
        f"    commits/insert {(commits - before[0]) / jobs:.3f}"
        f"  WAL/insert {(wal - before[1]) / jobs:,.0f} B (server-wide)"
    )


async def run(url: str, jobs: int, producers: int, profile: str, waits: bool) -> None:
    await activate(url)
    for n in (1, producers) if producers > 1 else (1,):
        mark = await _commits_and_wal(url)
        client = awa.AsyncClient(url, max_connections=max(4, producers + 2))
        try:
            await client.insert(BenchNoop(seq=-1, t=0.0), queue=QUEUE)  # warm the pool
            counter = iter(range(jobs))

            async def producer(client: awa.AsyncClient, counter: Iterator[int]) -> None:
                for i in counter:
                    await client.insert(BenchNoop(seq=i, t=time.time()), queue=QUEUE)

            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_waits(url, stop)) if waits and n > 1 else None
            with maybe_profile(profile):
                started, cpu = time.perf_counter(), time.process_time()
                await asyncio.gather(*(producer(client, counter) for _ in range(n)))
                label = "single, 1 producer" if n == 1 else f"single, {n} producers"
                report(label, jobs, started, client_cpu=_cpu_per_insert(cpu, jobs))
            if sampler is not None:
                stop.set()
                print("server waits:", dict((await sampler).most_common(8)), flush=True)
        finally:
            await client.close()
        print(await _per_insert(url, mark, jobs), flush=True)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--producers", type=int, default=8)
    p.add_argument(
        "--waits", action="store_true", help="sample server wait events (concurrent phase)"
    )
    a = p.parse_args()
    name = a.db or "awa_bench_single"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.producers, a.profile, a.waits))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
