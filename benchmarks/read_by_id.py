"""Reads of jobs by id on the queue-storage engine: ``get_job`` and the snapshot read that
every admin write, DLQ move, callback and wide completion makes (``FactWriter.resolve``).

Migrates a scratch database, enqueues ``--jobs`` jobs, claims and completes half of them,
then calls ``engine.get_job`` ``--reads`` times over the ids from ``--readers`` concurrent
loops, each on the engine's pool. Prints reads/s and the server's planning and execution
time per read (``pg_stat_statements`` when the server has it loaded, else nothing).

    .venv/bin/python -m benchmarks.read_by_id
    .venv/bin/python -m benchmarks.read_by_id --reads 20000 --readers 4
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from awa.adapters._pg.migrations import migrate
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from benchmarks._common import drop_database, fresh_database, parser

QUEUE = "reads"

#: The statements a read by id runs, as pg_stat_statements shows them.
_STATS = """
SELECT coalesce(sum(plans), 0), coalesce(sum(total_plan_time), 0),
    coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0)
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = %s AND s.query LIKE '%%jobs_resolved WHERE id = ANY%%'
"""


def _server_stats(url: str, database: str) -> tuple[float, float, float, float] | None:
    """(plans, plan ms, calls, execution ms) of the snapshot read in ``database``, or None
    when the server does not load pg_stat_statements."""
    with psycopg.connect(url, autocommit=True) as conn:
        loaded = conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ).fetchone()
        if loaded is None:
            try:
                conn.execute("CREATE EXTENSION pg_stat_statements")
            except psycopg.Error:
                return None
        try:
            row = conn.execute(_STATS, (database,)).fetchone()
        except psycopg.Error:
            return None
    assert row is not None
    return (float(row[0]), float(row[1]), float(row[2]), float(row[3]))


async def run(url: str, database: str, jobs: int, reads: int, readers: int) -> dict[str, Any]:
    await migrate(url)
    engine = await QueueStorageEngine.open(
        url, clock=SystemClock(), schema="awa", max_connections=readers + 2
    )
    try:
        specs = [JobSpec(kind="noop", queue=QUEUE)] * jobs
        ids = [job.id for job in await engine.enqueue_many(specs)]
        claims = await engine.claim(QUEUE, limit=jobs // 2)
        await engine.complete([claim.lease for claim in claims])
        # One read per reader first, so each pool connection exists before the clock starts.
        await asyncio.gather(*(engine.get_job(ids[i % len(ids)]) for i in range(readers)))
        before = _server_stats(url, database)
        per_reader = reads // readers
        started = time.perf_counter()

        async def reader(offset: int) -> None:
            for i in range(per_reader):
                found = await engine.get_job(ids[(offset + i * readers) % len(ids)])
                assert found is not None

        await asyncio.gather(*(reader(r) for r in range(readers)))
        elapsed = time.perf_counter() - started
        after = _server_stats(url, database)
    finally:
        await engine.close()
    done = per_reader * readers
    out: dict[str, Any] = {"reads": done, "seconds": elapsed, "reads_per_s": done / elapsed}
    if before is not None and after is not None:
        plans, plan_ms, calls, exec_ms = (a - b for a, b in zip(after, before, strict=True))
        out.update(
            plans=plans,
            calls=calls,
            plan_ms_per_read=plan_ms / max(calls, 1),
            exec_ms_per_read=exec_ms / max(calls, 1),
        )
    return out


def main() -> None:
    p = parser("reads of jobs by id (get_job) on queue storage")
    p.add_argument("--jobs", type=int, default=1_000)
    p.add_argument("--reads", type=int, default=5_000)
    p.add_argument("--readers", type=int, default=2)
    args = p.parse_args()
    name = args.db or "awa_bench_read_by_id"
    url = fresh_database(args.admin_url, name)
    try:
        out = asyncio.run(run(url, name, args.jobs, args.reads, args.readers))
    finally:
        drop_database(args.admin_url, name)
    line = f"{out['reads']} reads in {out['seconds']:.2f} s: {out['reads_per_s']:,.0f} reads/s"
    if "plans" in out:
        line += (
            f"; snapshot read: {out['plans']:.0f} plans for {out['calls']:.0f} calls,"
            f" server plan {out['plan_ms_per_read']:.2f} ms + execution"
            f" {out['exec_ms_per_read']:.2f} ms per read"
        )
    print(line)


if __name__ == "__main__":
    main()
