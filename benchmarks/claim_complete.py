"""Claim-batch and completion-flush throughput of the storage engine the client wires
(the transition-routing engine over queue storage), without the worker runtime.

Enqueues ``--jobs`` jobs, then alternates ``claim(limit=--batch)`` and one
``complete(leases)`` flush per batch, timing each kind of call separately. With
``--statements`` it also times every engine statement by name (round-trip cost).

    .venv/bin/python -m benchmarks.claim_complete --jobs 20000 --batch 64
    .venv/bin/python -m benchmarks.claim_complete --jobs 20000 --batch 64 --statements
    .venv/bin/python -m benchmarks.claim_complete --profile pyinstrument
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from typing import Any

import awa
from awa.adapters.postgres_queue_storage import statements as qs_statements
from awa.entrypoints.routing import open_postgres_routing
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser
from benchmarks.enqueue_bulk import activate

QUEUE = "bench"


@dataclass
class BenchNoop:
    seq: int
    t: float


def _time_statements() -> dict[str, list[float]]:
    """Wrap the engine's statement runner to time each named statement."""
    timings: dict[str, list[float]] = collections.defaultdict(list)
    original = qs_statements.Statements.exec

    async def timed(
        self: qs_statements.Statements, conn: Any, name: str, **params: Any
    ) -> list[dict[str, Any]]:
        started = time.perf_counter()
        try:
            return await original(self, conn, name, **params)
        finally:
            timings[name].append(time.perf_counter() - started)

    qs_statements.Statements.exec = timed  # type: ignore[method-assign]
    return timings


async def run(url: str, jobs: int, batch: int, statements: bool, profile: str) -> None:
    await activate(url)
    client = awa.AsyncClient(url, max_connections=4)
    for start in range(0, jobs, 5000):
        await client.enqueue_many_copy(
            [BenchNoop(seq=i, t=0.0) for i in range(start, min(jobs, start + 5000))], queue=QUEUE
        )
    await client.close()
    timings = _time_statements() if statements else {}
    engine = await open_postgres_routing(url, max_connections=4)
    await engine.bind_transition_role("auto")
    claim_s = complete_s = claim_cpu = complete_cpu = 0.0
    claimed = calls = 0
    try:
        with maybe_profile(profile):
            while True:
                t0, c0 = time.perf_counter(), time.process_time()
                claims = await engine.claim(QUEUE, limit=batch)
                t1, c1 = time.perf_counter(), time.process_time()
                if not claims:
                    break
                await engine.complete([c.lease for c in claims])
                t2, c2 = time.perf_counter(), time.process_time()
                claim_s += t1 - t0
                complete_s += t2 - t1
                claim_cpu += c1 - c0
                complete_cpu += c2 - c1
                claimed += len(claims)
                calls += 1
    finally:
        await engine.close()
    print(
        f"claim batch {batch}: {calls} calls, {1000 * claim_s / calls:.2f} ms/call, "
        f"{claimed / claim_s:,.0f} jobs/s, client CPU {1e6 * claim_cpu / claimed:.0f} us/job"
    )
    print(
        f"completion flush {batch}: {calls} calls, {1000 * complete_s / calls:.2f} ms/call, "
        f"{claimed / complete_s:,.0f} jobs/s, client CPU {1e6 * complete_cpu / claimed:.0f} us/job"
    )
    print(f"claim + complete, serial: {claimed / (claim_s + complete_s):,.0f} jobs/s")
    for name, values in sorted(timings.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name:20s} {len(values):6d} calls {1000 * sum(values) / len(values):7.2f} ms")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--statements", action="store_true")
    a = p.parse_args()
    name = a.db or "awa_bench_claim"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.batch, a.statements, a.profile))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
