"""``wait_for`` latency: from a handler's return to the waiter's wake-up, at a steady rate.

One process runs a worker (queue ``results``, a task with ``store_result=True`` that
notes the instant it returns) and a producer inserting ``--rate`` jobs a second for
``--seconds``. Each job is inserted due ``--lead`` seconds later, so its waiter
(``client.wait_for``, started right after the insert) is listening before the job runs:
the measured path is the notification after the completion, not a first read. Prints
p50 / p90 / p99 / max of (waiter woke) - (handler returned), and how many waiters fell
back to a poll (latency >= the 1 s poll).

    .venv/bin/python -m benchmarks.wait_for_latency --rate 200 --seconds 10
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime, timedelta

import awa
from benchmarks._common import drop_database, fresh_database, parser, percentile

QUEUE = "results"


@dataclasses.dataclass
class Echo:
    n: int


async def run(url: str, rate: float, seconds: float, lead: float) -> None:
    client = awa.AsyncClient(url, max_connections=20)
    returned: dict[int, float] = {}
    woke: dict[int, float] = {}

    @client.task(Echo, queue=QUEUE, store_result=True)
    async def echo(job: awa.Job[Echo]) -> dict[str, int]:
        returned[job.id] = time.perf_counter()
        return {"n": job.args.n}

    await client.migrate()
    await client.start([(QUEUE, 20)], promote_interval_ms=20)

    async def wait(job_id: int, n: int) -> None:
        result = await client.wait_for(job_id, timeout=60)
        woke[job_id] = time.perf_counter()
        assert result == {"n": n}

    waiters: list[asyncio.Task[None]] = []
    total = int(rate * seconds)
    started = time.perf_counter()
    for n in range(total):
        due = started + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        run_at = datetime.now(UTC) + timedelta(seconds=lead)
        job = await client.insert(Echo(n=n), queue=QUEUE, run_at=run_at)
        waiters.append(asyncio.create_task(wait(job.id, n)))
    await asyncio.gather(*waiters)
    offered = total / (time.perf_counter() - started)
    await client.shutdown()
    await client.close()

    latencies = [(woke[i] - returned[i]) * 1000 for i in woke]
    polled = sum(1 for ms in latencies if ms >= 1000)
    print(f"jobs {len(latencies)}, offered {offered:.0f}/s, lead {lead:.2f} s")
    print(
        "wait_for latency (handler return -> waiter awake), ms: "
        f"p50 {percentile(latencies, 0.50):.2f}  p90 {percentile(latencies, 0.90):.2f}  "
        f"p99 {percentile(latencies, 0.99):.2f}  max {max(latencies):.2f}; "
        f"woken by a poll: {polled}"
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--lead", type=float, default=0.3, help="seconds each job is due after insert")
    args = p.parse_args()
    name = args.db or "awa_bench_wait_for"
    url = fresh_database(args.admin_url, name)
    try:
        asyncio.run(run(url, args.rate, args.seconds, args.lead))
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
