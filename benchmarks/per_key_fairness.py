"""Fairness among concurrency keys (issue 43): one key with a large backlog must not delay
a key with one job by more than about one claim round.

One worker process (``--slots`` handlers, default 64) serves a queue with
``"max_running_per_key": --limit`` (default 32, so the hot key alone could fill half the
worker). ``--backlog`` jobs (default 100,000) of key ``hot`` are enqueued first and the
worker is started on them; once it has run ``--warmup`` of them (default 2,000), one job
for each of ``--small-keys`` keys (default 100) is inserted behind the whole backlog.
Each handler sleeps ``--work-ms`` (default 5). Printed: the pickup of the small keys'
jobs (their handler's start minus their insert, p50 / p99 / max) and how many hot jobs
started meanwhile; then the insert's own time and the same figures from its return, which
leave out the insert (a COPY of 100 keyed jobs takes a staged path, 0.3-0.5 s on a busy
host) and show what the claims' rotation among keys decides. The run ends once every
small job has started; the rest of the backlog is left (the database is dropped).

    .venv/bin/python -m benchmarks.per_key_fairness                       # the issue's size
    .venv/bin/python -m benchmarks.per_key_fairness --backlog 5000 --warmup 500  # smoke
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import awa
from benchmarks._common import drop_database, fresh_database, parser, percentile

QUEUE = "per_key_fairness"


@dataclass
class Work:
    key: str
    inserted: float


async def _enqueue_backlog(client: awa.AsyncClient, backlog: int) -> None:
    for first in range(0, backlog, 5000):
        batch = range(first, min(backlog, first + 5000))
        await client.insert_many_copy(
            [Work("hot", 0.0) for _ in batch],
            queue=QUEUE,
            opts=[{"concurrency_key": "hot"} for _ in batch],
        )


async def run(
    url: str, backlog: int, small_keys: int, warmup: int, slots: int, limit: int, work_ms: float
) -> None:
    setup = awa.AsyncClient(url, max_connections=8)
    await setup.migrate()
    await setup.pause_queue(QUEUE)
    await _enqueue_backlog(setup, backlog)

    client = awa.AsyncClient(url, max_connections=20)
    hot_done = 0
    warmed = asyncio.Event()
    pickups: list[float] = []
    all_picked = asyncio.Event()
    hot_at_insert = hot_at_commit = 0
    insert_s = 0.0

    @client.task(Work, queue=QUEUE)
    async def _handle(job: awa.Job[Work]) -> None:
        nonlocal hot_done
        if job.args.key == "hot":
            hot_done += 1
            if hot_done >= warmup:
                warmed.set()
        else:
            pickups.append(time.time() - job.args.inserted)
            if len(pickups) >= small_keys:
                all_picked.set()
        await asyncio.sleep(work_ms / 1000)

    await client.start(
        [{"name": QUEUE, "max_workers": slots, "max_running_per_key": limit}],
        poll_interval_ms=50,
    )
    await setup.resume_queue(QUEUE)
    try:
        await asyncio.wait_for(warmed.wait(), 600)
        hot_at_insert = hot_done
        now = time.time()
        await setup.insert_many_copy(
            [Work(f"small-{i}", now) for i in range(small_keys)],
            queue=QUEUE,
            opts=[{"concurrency_key": f"small-{i}"} for i in range(small_keys)],
        )
        insert_s = time.time() - now
        hot_at_commit = hot_done
        await asyncio.wait_for(all_picked.wait(), 600)
    finally:
        await client.shutdown(timeout_ms=10000)
        await client.close()
        await setup.close()
    ms = [1000 * p for p in pickups]
    # The same pickups from the moment the insert returned (its commit): what the claims
    # rotating among keys decide, without the insert's own time.
    after = [m - 1000 * insert_s for m in ms]
    print(
        f"{backlog} hot jobs (limit {limit} per key, {slots} slots, {work_ms:g} ms each), "
        f"{small_keys} keys of one job inserted behind them: pickup p50 "
        f"{percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms; "
        f"{hot_done - hot_at_insert} hot jobs started meanwhile. The insert took "
        f"{1000 * insert_s:.1f} ms; from its return: p50 {percentile(after, 0.5):.1f} ms, "
        f"p99 {percentile(after, 0.99):.1f} ms, max {max(after):.1f} ms, "
        f"{hot_done - hot_at_commit} hot jobs started",
        flush=True,
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--backlog", type=int, default=100_000)
    p.add_argument("--small-keys", type=int, default=100)
    p.add_argument("--warmup", type=int, default=2_000)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--limit", type=int, default=32)
    p.add_argument("--work-ms", type=float, default=5.0)
    a = p.parse_args()
    name = a.db or "awa_bench_per_key_fairness"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.backlog, a.small_keys, a.warmup, a.slots, a.limit, a.work_ms))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
