"""One process of ``concurrent_backlog --peers``, run in a system's own venv.

Drives a system through the shared harness's adapter (``adapters.<module>.Adapter`` from
``--harness``), so it imports only the standard library and the adapter; the benchmark
package and ``awa`` may not be installed in a peer's venv. Roles:

* ``setup``: ``adapter.setup()`` on the fresh database;
* ``produce``: ``--count`` jobs from ``--first`` on, in rounds of 500: 20
  ``enqueue_one`` calls and one ``enqueue_bulk`` of 480 (the harness has one bulk call;
  the project's own run splits it into two copy calls);
* ``work``: ``adapter.run_worker(--slots)`` until SIGTERM, then the adapter's graceful
  stop; prints ``READY`` once the worker runs;
* ``watch``: polls ``adapter.pending(--count)`` every 20 ms and prints one JSON line: the
  wall time of the first poll below ``--count`` (the drain began), of the first poll at 0,
  and how many polls it took.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
import time
from typing import Any

ROUND_SINGLE = 20
ROUND_BULK = 480


def _adapter(harness: str, module: str, dsn: str) -> Any:
    sys.path.insert(0, harness)
    return importlib.import_module(f"adapters.{module}").Adapter(dsn, {})


def _payload(seq: int) -> dict[str, Any]:
    return {"seq": seq, "t": time.time()}


async def _produce(ad: Any, first: int, count: int) -> None:
    await ad.open()
    try:
        seq, end = first, first + count
        while seq < end:
            for _ in range(min(ROUND_SINGLE, end - seq)):
                await ad.enqueue_one(_payload(seq))
                seq += 1
            bulk = min(ROUND_BULK, end - seq)
            if bulk:
                await ad.enqueue_bulk([_payload(s) for s in range(seq, seq + bulk)])
                seq += bulk
    finally:
        await ad.close()


async def _work(ad: Any, slots: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await ad.open()
    try:

        def on_start(payload: dict[str, Any]) -> None:
            pass

        def on_done(payload: dict[str, Any]) -> None:
            pass

        task = asyncio.create_task(ad.run_worker(slots, stop, on_start, on_done))
        print("READY", flush=True)
        await task
    finally:
        await ad.close()


async def _watch(ad: Any, total: int, timeout: float) -> None:
    began: float | None = None
    polls = 0
    deadline = time.monotonic() + timeout
    while True:
        left = await ad.pending(total)
        polls += 1
        now = time.time()
        if began is None and left < total:
            began = now
        if left == 0 or time.monotonic() > deadline:
            print(json.dumps({"began": began, "ended": now, "left": left, "polls": polls}))
            return
        await asyncio.sleep(0.02)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["setup", "produce", "work", "watch"])
    p.add_argument("--harness", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--slots", type=int, default=32)
    p.add_argument("--timeout", type=float, default=1800.0)
    a = p.parse_args()
    ad = _adapter(a.harness, a.adapter, a.dsn)
    if a.role == "setup":
        asyncio.run(ad.setup())
    elif a.role == "produce":
        asyncio.run(_produce(ad, a.first, a.count))
    elif a.role == "work":
        asyncio.run(_work(ad, a.slots))
    else:
        asyncio.run(_watch(ad, a.count, a.timeout))


if __name__ == "__main__":
    main()
