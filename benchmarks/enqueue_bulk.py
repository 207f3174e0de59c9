"""Bulk enqueue through the public client: ``enqueue_many_copy`` (binary ``COPY`` when
producers route to queue storage) against ``insert_many_copy`` (multi-row insert with
per-key duplicate skipping), ``--jobs`` jobs in chunks of ``--chunk`` like the harness.

    .venv/bin/python -m benchmarks.enqueue_bulk --jobs 50000
    .venv/bin/python -m benchmarks.enqueue_bulk --jobs 50000 --only copy --profile pyinstrument
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser, report

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int
    t: float


async def activate(url: str) -> None:
    """Migrate and start a worker once, as a first deployment does (activates queue
    storage on a fresh install)."""
    # One queue's worker: queues + 4 connections, as the configuration check asks.
    setup = awa.AsyncClient(url, max_connections=5)
    await setup.migrate()

    @setup.task(BenchNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    await setup.start([(QUEUE, 1)], poll_interval_ms=50)
    await setup.shutdown(timeout_ms=5000)
    await setup.close()


async def run(url: str, jobs: int, chunk: int, only: str | None, profile: str) -> None:
    await activate(url)
    client = awa.AsyncClient(url, max_connections=4)
    try:
        for label in ("copy", "insert_many_copy"):
            if only is not None and label != only:
                continue
            chunks = [
                [BenchNoop(seq=i, t=time.time()) for i in range(s, min(jobs, s + chunk))]
                for s in range(0, jobs, chunk)
            ]
            with maybe_profile(profile):
                started = time.perf_counter()
                for c in chunks:
                    if label == "copy":
                        await client.enqueue_many_copy(c, queue=QUEUE)
                    else:
                        await client.insert_many_copy(c, queue=QUEUE)
                report(f"bulk {label}", jobs, started, chunk=chunk)
    finally:
        await client.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=50000)
    p.add_argument("--chunk", type=int, default=5000)
    p.add_argument("--only", choices=("copy", "insert_many_copy"), default=None)
    a = p.parse_args()
    name = a.db or "awa_bench_bulk"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.chunk, a.only, a.profile))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
