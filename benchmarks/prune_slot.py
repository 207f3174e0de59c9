"""Time one queue-ring prune of a slot holding ``--jobs`` completed jobs, step by step.

Installs queue storage into a scratch schema with a four-slot ring, fills slot 0 with
completed jobs, turns the ring until slot 0 is next, then prunes it once and prints how
long each step took (stand-in partitions, live check, reading the slot's jobs, counters,
lock and swap). At 1,000 jobs/s every slot holds about 1,000 jobs; the maintenance
leader prunes one slot per second, so the prune must stay well below that.

    .venv/bin/python -m benchmarks.prune_slot --jobs 5000
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import awa
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import (
    QueueStorageEngine,
    _base,
    install_queue_storage,
    ring,
)
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser

SCHEMA = "bench_prune"
STEPS: dict[type, tuple[str, ...]] = {
    ring.RingOps: (
        "_build_spares",
        "_slot_row_counts",
        "_slot_is_live",
        "_head_states_in_slot",
        "_lock_and_swap",
    ),
    _base.QueueStorageBase: ("_flush",),
}


def _time_steps() -> dict[str, list[float]]:
    timings: dict[str, list[float]] = collections.defaultdict(list)
    for cls, names in STEPS.items():
        for name in names:
            original = getattr(cls, name)

            def timed(original: Any, name: str) -> Any:
                async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return await original(self, *args, **kwargs)
                    finally:
                        timings[name].append((time.perf_counter() - started) * 1000)

                return wrapper

            setattr(cls, name, timed(original, name))
    return timings


async def run(url: str, jobs: int, profile: str) -> None:
    client = awa.AsyncClient(url)
    await client.migrate()
    await client.close()
    await install_queue_storage(url, SCHEMA, queue_slot_count=4, lease_slot_count=4)
    engine = await QueueStorageEngine.open(
        url, clock=SystemClock(), backoff=Backoff(), schema=SCHEMA
    )
    try:

        async def settle(count: int) -> None:
            await engine.enqueue_many(
                [JobSpec(kind="k", queue="q", args={"n": i}) for i in range(count)]
            )
            left = count
            while left:
                claims = await engine.claim("q", limit=min(left, 500))
                await engine.complete([c.lease for c in claims])
                left -= len(claims)

        await settle(jobs)
        for _ in range(3):
            assert await engine.rotate() == "rotated"
            await settle(1)
        timings = _time_steps()
        with maybe_profile(profile):
            started = time.perf_counter()
            outcome = await engine.prune()
            elapsed = (time.perf_counter() - started) * 1000
        print(f"prune of a slot with {jobs} completed jobs: {outcome} in {elapsed:.1f} ms")
        for name, values in timings.items():
            if name != "_flush" or values:
                print(f"  {name:22} {sum(values):7.1f} ms")
    finally:
        await engine.close()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    a = p.parse_args()
    name = a.db or "awa_bench_prune"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.profile))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
