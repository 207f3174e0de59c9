"""A worker's CPU per job at a steady rate, and where its claims go.

A producer process inserts one job at a time (up to 16 in flight) at ``--rate`` per
second; this process runs the worker (one queue, 64 slots, a no-op handler) and, after
``--warmup`` seconds, measures for ``--seconds``: jobs run, the process's CPU (user and
system) per job, each thread's share, and the claims the queue's dispatcher made (jobs
per claim, and how many went beside a claim in flight at a notification). With
``--cprofile PATH`` the main thread runs under ``cProfile`` on its own CPU clock
(``time.thread_time``) and the stats go to ``PATH`` (the profile roughly doubles the
CPU; compare its shares, not its totals)::

    python -m benchmarks.worker_cpu --rate 1000 --seconds 15
    python -m benchmarks.worker_cpu --rate 1000 --cprofile /tmp/worker.prof

Linux only (per-thread CPU from ``/proc/self/task``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import awa
from benchmarks._common import drop_database, fresh_database, parser

QUEUE = "cpu_probe"


@dataclass
class CpuProbe:
    seq: int


def _threads() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def _process() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _produce(url: str, rate: float, seconds: float) -> None:
    client = awa.AsyncClient(url, max_connections=8)
    in_flight = asyncio.Semaphore(16)
    tasks: set[asyncio.Task[None]] = set()

    async def one(seq: int) -> None:
        async with in_flight:
            await client.insert(CpuProbe(seq), queue=QUEUE)

    started = time.monotonic()
    seq = 0
    while time.monotonic() - started < seconds:
        due = started + seq / rate
        if due > time.monotonic():
            await asyncio.sleep(due - time.monotonic())
        task = asyncio.create_task(one(seq))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        seq += 1
    await asyncio.gather(*tasks)
    await client.close()


async def _work(url: str, warmup: float, seconds: float, profile_to: str | None) -> None:
    client = awa.AsyncClient(url, max_connections=20)
    done = 0

    @client.task(CpuProbe, queue=QUEUE)
    async def handle(job: object) -> None:
        nonlocal done
        done += 1

    await client.start([{"name": QUEUE, "max_workers": 64}])
    await asyncio.sleep(warmup)
    dispatchers = client._runtime.dispatchers if client._runtime is not None else []
    profile = cProfile.Profile(time.thread_time) if profile_to else None
    jobs0, cpu0, threads0 = done, _process(), _threads()
    claims0 = sum(d.claim_calls for d in dispatchers)
    on_wake0 = sum(d.wake_claims for d in dispatchers)
    if profile is not None:
        profile.enable()
    await asyncio.sleep(seconds)
    if profile is not None:
        profile.disable()
    jobs, cpu, threads = done - jobs0, _process() - cpu0, _threads()
    claims = sum(d.claim_calls for d in dispatchers) - claims0
    on_wake = sum(d.wake_claims for d in dispatchers) - on_wake0
    names = {t.native_id: t.name for t in threading.enumerate()}
    print(
        f"jobs {jobs} ({jobs / seconds:,.0f}/s) cpu {cpu:.2f} s, {cpu / max(jobs, 1) * 1000:.3f}"
        f" ms per job; claims {claims} ({on_wake} beside a claim in flight),"
        f" {jobs / max(claims, 1):.1f} jobs per claim",
        flush=True,
    )
    for tid, total in sorted(threads.items(), key=lambda kv: threads0.get(kv[0], 0) - kv[1]):
        used = total - threads0.get(tid, 0.0)
        if used >= 0.01:
            print(f"  thread {names.get(tid, tid)}: {used:.2f} s")
    if profile is not None and profile_to:
        profile.dump_stats(profile_to)
        print(f"profile of the main thread written to {profile_to}")
    await client.shutdown(timeout_ms=5000)
    await client.close()


async def _migrate(url: str) -> None:
    client = awa.AsyncClient(url, max_connections=2)
    await client.migrate()
    await client.close()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--cprofile", default=None, help="write the main thread's profile here")
    p.add_argument("--role", choices=("run", "produce"), default="run", help=argparse.SUPPRESS)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "produce":
        asyncio.run(_produce(args.url, args.rate, args.seconds))
        return
    name = args.db or "awa_bench_worker_cpu"
    url = fresh_database(args.admin_url, name)
    try:
        asyncio.run(_migrate(url))
        producer = subprocess.Popen(
            [
                sys.executable, "-m", "benchmarks.worker_cpu", "--role", "produce",
                "--url", url, "--rate", str(args.rate),
                "--seconds", str(args.warmup + args.seconds + 2),
            ]
        )  # fmt: skip
        try:
            asyncio.run(_work(url, args.warmup, args.seconds, args.cprofile))
        finally:
            producer.wait(timeout=60)
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
