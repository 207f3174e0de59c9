"""CPU a worker's LISTEN connection costs per notification.

A worker hears one notification per committed insert batch of its queues; at 1,000 jobs/s
that is up to 1,000 wake-ups a second, each read by the runtime's listener. This
benchmark subscribes through the library's notifier, and waits the way the runtime's
listener does (``wait(math.inf)`` inside a bound of its clock), while a sender process
commits ``--rate`` notifications a second, one per transaction, for ``--seconds``. It
reports the listening process's CPU time per notification and per wake-up, read from
``time.process_time()`` over the window the notifications arrived in (the sender's CPU is
its own process's)::

    .venv/bin/python -m benchmarks.listener_cost --rate 1000 --seconds 10 --repeat 3

Run it on two checkouts (``PYTHONPATH=<checkout>``) to compare a change to the notifier.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

import anyio

from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters.clock import SystemClock
from benchmarks._common import DEFAULT_ADMIN_URL

CHANNEL = "awa:listener_cost"

_SENDER = """
import sys, time, psycopg
url, channel, rate, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
with psycopg.connect(url, autocommit=True) as conn:
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    start = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        conn.execute("SELECT pg_notify(%s, %s)", (channel, str(i)))
    conn.execute("SELECT pg_notify(%s, 'end')", (channel,))
"""


async def one_run(url: str, rate: float, seconds: float) -> dict[str, Any]:
    notifier = PostgresNotifier(url, clock=SystemClock())
    subscription = await notifier.subscribe([CHANNEL])
    sender = subprocess.Popen(
        [sys.executable, "-c", _SENDER, url, CHANNEL, str(rate), str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sender.stdin is not None and sender.stdout is not None
    try:
        assert sender.stdout.readline().strip() == "ready"
        sender.stdin.write("go\n")
        sender.stdin.flush()
        wakes = 0
        notifications = 0
        cpu_start = wall_start = None
        done = False
        while not done:
            with anyio.move_on_after(30.0):
                found = await subscription.payloads(math.inf)
                if cpu_start is None:
                    cpu_start, wall_start = time.process_time(), time.monotonic()
                wakes += 1
                for _, payload in found:
                    if payload == "end":
                        done = True
                    else:
                        notifications += 1
        assert cpu_start is not None and wall_start is not None
        cpu = time.process_time() - cpu_start
        wall = time.monotonic() - wall_start
    finally:
        sender.wait(30)
        await subscription.close()
    return {
        "notifications": notifications,
        "wakes": wakes,
        "cpu_s": round(cpu, 4),
        "wall_s": round(wall, 3),
        "cpu_us_per_notification": round(cpu / max(notifications, 1) * 1e6, 2),
        "cpu_us_per_wake": round(cpu / max(wakes, 1) * 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_ADMIN_URL, help="database to notify on")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    url = args.url
    runs = [asyncio.run(one_run(url, args.rate, args.seconds)) for _ in range(args.repeat)]
    for run in runs:
        print(json.dumps(run))
    print(
        json.dumps(
            {
                "rate": args.rate,
                "median_cpu_us_per_notification": statistics.median(
                    r["cpu_us_per_notification"] for r in runs
                ),
                "median_cpu_us_per_wake": statistics.median(r["cpu_us_per_wake"] for r in runs),
            }
        )
    )


if __name__ == "__main__":
    main()
