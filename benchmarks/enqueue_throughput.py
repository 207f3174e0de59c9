"""Enqueue throughput of the queue-storage engine: binary COPY against the multi-row insert.

Installs the engine into a scratch schema and inserts ``--jobs`` jobs in chunks of
``--chunk`` through :meth:`QueueStorageEngine.enqueue_many_copy` (binary ``COPY`` into a
staging table, then one ``INSERT ... SELECT``) and through ``enqueue_many`` (one multi-row
``INSERT ... SELECT FROM jsonb_to_recordset``), and prints jobs/s for each.

    .venv/bin/python benchmarks/enqueue_throughput.py postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import time

import anyio
import psycopg

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.job import JobSpec

SCHEMA = "qs_enqueue_bench"


def _specs(count: int, offset: int) -> list[JobSpec]:
    return [
        JobSpec(kind="bench", queue="bench", args={"n": offset + i, "payload": "x" * 32})
        for i in range(count)
    ]


async def run(url: str, jobs: int, chunk: int) -> None:
    await install_queue_storage(url, SCHEMA, reset=True)
    engine = await QueueStorageEngine.open(url, clock=SystemClock(), schema=SCHEMA)
    try:
        for label in ("copy", "multi-row insert"):
            await engine.reset()
            started = time.perf_counter()
            done = 0
            while done < jobs:
                size = min(chunk, jobs - done)
                specs = _specs(size, done)
                if label == "copy":
                    done += await engine.enqueue_many_copy(specs)
                else:
                    done += len(await engine.enqueue_many(specs))
            elapsed = time.perf_counter() - started
            with psycopg.connect(url) as conn:
                row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.ready_entries").fetchone()
            stored = 0 if row is None else int(row[0])
            print(
                f"{label:17s} {done} jobs in chunks of {chunk}: {elapsed:.2f} s "
                f"({done / elapsed:,.0f} jobs/s); ready rows stored: {stored}"
            )
    finally:
        await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="database URL (the benchmark uses schema qs_enqueue_bench)")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=5_000)
    args = parser.parse_args()
    anyio.run(run, args.url, args.jobs, args.chunk)


if __name__ == "__main__":
    main()
