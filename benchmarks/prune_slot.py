"""Time one queue-ring prune of a slot holding ``--jobs`` completed jobs, step by step.

Installs queue storage into a scratch schema with a ring of ``--slots`` slots, fills
every slot with ``--jobs`` completed jobs, then turns the ring ``--turns`` times as the
maintenance leader does (prune the slot the ring enters next, fill the current slot
again, rotate) and prints the median time of each prune step (emptying the stand-ins
swapped out by the previous turn, building missing ones, live check, reading the slot's
jobs, counters, lock and swap). At 1,000 jobs/s every slot holds about 1,000 jobs; the
leader prunes one slot per second, so the prune must stay well below that, and every
millisecond of it competes with the claims for the CPU.

When the server runs on this machine (its processes' ``/proc/<pid>/schedstat`` readable),
each step's server CPU is printed too: the CPU time of the server's processes (the
prune's backend, and the checkpointer or WAL writer it made work) while the step ran,
kernel time included. Nothing else may run on the server meanwhile.

    .venv/bin/python -m benchmarks.prune_slot --jobs 200 --slots 16
"""

from __future__ import annotations

import asyncio
import collections
import os
import statistics
import time
from typing import Any

import awa
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import (
    QueueStorageEngine,
    facts,
    install_queue_storage,
    ring,
    swap,
)
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser
from benchmarks.process_cpu import POSTGRES_GROUPS, command_of, group_of, schedstat

SCHEMA = "bench_prune"
STEPS: dict[type, tuple[str, ...]] = {
    swap.PartitionSwap: ("clear", "lock_and_swap"),
    ring.QueueRing: ("_slot_row_counts", "head_states_in_slot"),
    facts.FactWriter: ("flush",),
}


class ServerCpu:
    """The CPU time used by the server's processes on this machine that run when it is
    made (so after the engine opened its connections), in ms, kernel time included. Only
    those processes are read afterwards, so a reading costs the worker little."""

    def __init__(self) -> None:
        self.pids = [
            pid
            for pid in filter(str.isdigit, os.listdir("/proc"))
            if group_of(command_of(pid) or "") in POSTGRES_GROUPS
        ]

    def read(self) -> float | None:
        """The total so far; None when none of them can be read (the server runs
        elsewhere, or as a user whose processes this one may not read)."""
        found = [stat[0] for stat in map(schedstat, self.pids) if stat is not None]
        return sum(found) / 1e6 if found else None

    def since(self, started: float | None) -> float | None:
        now = self.read()
        return None if started is None or now is None else now - started


def _time_steps(
    cpu: ServerCpu,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    timings: dict[str, list[float]] = collections.defaultdict(list)
    server: dict[str, list[float]] = collections.defaultdict(list)
    for cls, names in STEPS.items():
        for name in names:
            original = getattr(cls, name)

            def timed(original: Any, name: str) -> Any:
                async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                    started, before = time.perf_counter(), cpu.read()
                    try:
                        return await original(self, *args, **kwargs)
                    finally:
                        timings[name].append((time.perf_counter() - started) * 1000)
                        used = cpu.since(before)
                        if used is not None:
                            server[name].append(used)

                return wrapper

            setattr(cls, name, timed(original, name))
    return timings, server


async def run(url: str, jobs: int, slots: int, turns: int, profile: str) -> None:
    client = awa.AsyncClient(url)
    await client.migrate()
    await client.close()
    await install_queue_storage(url, SCHEMA, queue_slot_count=slots, lease_slot_count=4)
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

        for _ in range(slots - 1):
            await settle(jobs)
            assert await engine.rotate() == "rotated"
        await settle(jobs)
        server_cpu = ServerCpu()
        timings, server = _time_steps(server_cpu)
        elapsed: dict[str, list[float]] = collections.defaultdict(list)
        cpu: list[float] = []
        whole: list[float] = []
        with maybe_profile(profile):
            for _ in range(turns):
                started, used = time.perf_counter(), time.process_time()
                on_server = server_cpu.read()
                outcome = await engine.prune()
                cpu.append((time.process_time() - used) * 1000)
                spent = server_cpu.since(on_server)
                if spent is not None:
                    whole.append(spent)
                elapsed[outcome].append((time.perf_counter() - started) * 1000)
                assert await engine.rotate() == "rotated"
                await settle(jobs)
        print(f"{turns} turns of a ring of {slots} slots holding {jobs} completed jobs each:")
        for word, values in sorted(elapsed.items()):
            print(
                f"  prune {word}: {len(values)}, median {statistics.median(values):.1f} ms,"
                f" max {max(values):.1f} ms"
            )
        # The worker's own CPU: what a prune takes from the event loop that also claims.
        print(f"  worker CPU per prune   median {statistics.median(cpu):7.1f} ms")
        if whole:
            print(f"  server CPU per prune   median {statistics.median(whole):7.1f} ms")
        for name, values in timings.items():
            if values:
                step_cpu = server.get(name)
                extra = f", server CPU {statistics.median(step_cpu):5.1f} ms" if step_cpu else ""
                print(f"  {name:22} median {statistics.median(values):7.1f} ms{extra}")
    finally:
        await engine.close()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000, help="completed jobs per slot")
    p.add_argument("--slots", type=int, default=16, help="queue ring slots")
    p.add_argument("--turns", type=int, default=20, help="prunes measured")
    a = p.parse_args()
    name = a.db or "awa_bench_prune"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.jobs, a.slots, a.turns, a.profile))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
