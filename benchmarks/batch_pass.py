"""How long one pass of the batch-operation runner takes (ADR 0010, ADR 0014's
amendment): a pass has a 0.5 s budget and runs inside the maintenance leader's lease, so
its longest pass is what matters, not its throughput.

Installs queue storage into a scratch database, enqueues ``--jobs`` jobs (default 600),
submits a ``move_queue`` of all of them and steps the runner (chunks of 100, four changes
in flight: the defaults) until the operation completes. Prints the passes' count,
median and longest wall time, and the operation's counts.

    .venv/bin/python -m benchmarks.batch_pass
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import awa
from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.batch_ops import BatchFilter, BatchOpKind, BatchSpec
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.entrypoints.routing import postgres_control_plane
from awa.runtime.batch_runner import BatchRunner
from benchmarks._common import drop_database, fresh_database, parser

SCHEMA = "bench_batch_pass"
QUEUE = "source"


async def run(url: str, *, jobs: int) -> None:
    client = awa.AsyncClient(url)
    await client.migrate()
    await client.close()
    await install_queue_storage(url, SCHEMA)
    clock = SystemClock()
    engine = await QueueStorageEngine.open(url, clock=clock, backoff=Backoff(), schema=SCHEMA)
    pool = await open_pool(url, max_connections=2, min_connections=1)
    try:
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(jobs)])
        store = postgres_control_plane(pool, clock).batch_operations
        op = await store.create_batch_operation(
            spec=BatchSpec(BatchOpKind.MOVE_QUEUE, queue="target"),
            filter=BatchFilter(queue=QUEUE),
        )
        runner = BatchRunner(engine, store, runner_id="bench", clock=clock)
        passes: list[float] = []
        while True:
            started = time.perf_counter()
            more = await runner.step()
            passes.append(time.perf_counter() - started)
            if not more:
                break
        done = await store.get_batch_operation(op.id)
        assert done is not None
        print(
            f"{len(passes)} passes: median {statistics.median(passes) * 1000:.0f} ms, "
            f"longest {max(passes) * 1000:.0f} ms; {done.state}: {done.processed} processed, "
            f"{done.skipped} skipped; load {os.getloadavg()[0]:.2f}"
        )
    finally:
        await pool.close()
        await engine.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=600)
    args = p.parse_args()
    name = args.db or "bench_batch_pass"
    url = fresh_database(args.admin_url, name)
    try:
        asyncio.run(run(url, jobs=args.jobs))
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
