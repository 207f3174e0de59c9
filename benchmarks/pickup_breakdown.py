"""Where a job's pickup goes at a round trip: insert, wake-up, claim, hand-off.

Builds one worker "host" of :mod:`benchmarks.netns_fleet` (a network namespace behind the
delay relay) and runs, inside it, the shared harness's latency shape: a worker process
(64 slots, claim batch 512, poll 50 ms) and a producer process offering ``--rate`` single
``insert()`` calls per second, 8 in flight. Both processes time what they do on the host
clock, and each job's pickup (the producer hearing its commit to its handler starting) is
split into:

* ``call``: the producer's ``insert()`` call, from the call to hearing the commit;
* ``to_claim``: hearing the commit to sending the claim that returned the job (negative
  when that claim was already on its way);
* ``claim``: that claim's round trip (sent to returned);
* ``hand_off``: the claim's return to the handler's start;
* ``woken_by``: what ended the claim loop's wait before that claim (a notification, a
  returning permit or the loop's own re-check/poll timer, or no wait at all).

It also counts the claims sent at a notification while the loop's claim was in flight
(ADR 0037) and how many came back empty, and, after each empty one beside a loop's claim,
how long after that claim came back the next claim went (``after_empty``: the wait of a
job whose lane the loop's claim held).

The processes are timed by wrapping a few of the library's methods in the benchmark's own
processes (measurement only; the library is not changed). Needs root, like the fleet::

    .venv/bin/python -m benchmarks.pickup_breakdown --rtt 0,1,5,20 --rate 200 --seconds 10

``--loopback`` runs both processes on this host's own network instead (no namespace, no
root; ``--rtt`` is ignored)::

    .venv/bin/python -m benchmarks.pickup_breakdown --loopback --rate 200 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import itertools
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import awa
from awa.adapters.postgres_queue_storage import claim as claim_module
from awa.adapters.postgres_queue_storage import wakes as wakes_module
from awa.runtime import claim_ahead
from awa.runtime import dispatcher as dispatcher_module
from awa.runtime import listener as listener_module
from awa.runtime import wake as wake_module
from benchmarks._common import percentile
from benchmarks.drain import QUEUE, BenchNoop, enqueue_backlog
from benchmarks.netns_fleet import (
    _SERVER,
    _db_url,
    _ns,
    fresh,
    links_with_rtt,
    make_links,
    measured_rtt_ms,
    remove_links,
)

READY_TIMEOUT = 60.0


def _claims_ahead_off() -> None:
    """The dispatcher as it was before ADR 0037: no claim goes ahead (the benchmark's
    "off" arm, for a comparison within one run)."""
    claim_ahead.ClaimPacer.ahead_after = lambda self: None  # type: ignore[method-assign]


#: Set inside the task of a claim sent at a notification (``QueueDispatcher._wake_claim``).
_AT_NOTIFICATION = contextvars.ContextVar("at_notification", default=False)


def _instrument_worker(events: list[Any]) -> None:
    """Record every claim (sent, returned, job ids, whether it was sent at a notification
    beside the loop's), notification and wait of a loop."""
    claim_original = claim_module.Claims.claim

    async def claim(self: Any, queue: str, **kwargs: Any) -> Any:
        sent = time.time()
        got = await claim_original(self, queue, **kwargs)
        ids = [c.lease.job_id for c in got]
        events.append(("claim", sent, time.time(), ids, _AT_NOTIFICATION.get()))
        return got

    wake_claim_original = dispatcher_module.QueueDispatcher._wake_claim

    async def wake_claim(self: Any, granted: int) -> None:
        _AT_NOTIFICATION.set(True)
        await wake_claim_original(self, granted)

    fire_original = listener_module.ChannelListener._fire

    def fire(self: Any, channels: Any) -> None:
        events.append(("notified", time.time()))
        fire_original(self, channels)

    wait_original = wake_module.Waker.wait

    async def wait(self: Any, timeout: float) -> bool:
        woken = await wait_original(self, timeout)
        events.append(("waited", time.time(), woken, timeout))
        return woken

    claim_module.Claims.claim = claim  # type: ignore[method-assign]
    dispatcher_module.QueueDispatcher._wake_claim = wake_claim  # type: ignore[method-assign]
    listener_module.ChannelListener._fire = fire  # type: ignore[method-assign]
    wake_module.Waker.wait = wait  # type: ignore[method-assign]


async def _worker(url: str, out: str, ahead: bool) -> None:
    if not ahead:
        _claims_ahead_off()
    events: list[Any] = []
    _instrument_worker(events)
    client = awa.AsyncClient(url, max_connections=8)
    starts: list[tuple[int, float]] = []

    @client.task(BenchNoop, queue=QUEUE)
    async def noop(job: awa.Job[BenchNoop]) -> None:
        starts.append((job.id, time.time()))

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start(
        [{"name": QUEUE, "max_workers": 64, "claim_batch_size": 512}], poll_interval_ms=50
    )
    print("READY", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5000)
    await client.close()
    Path(out).write_text(json.dumps({"events": events, "starts": starts}))


async def _producer(url: str, rate: float, seconds: float, inflight: int, out: str) -> None:
    wake_sends: list[tuple[float, float]] = []
    run_original = getattr(wakes_module, "run")  # noqa: B009 (not re-exported)

    async def timed_run(*args: Any, **kwargs: Any) -> Any:
        sent = time.time()
        try:
            return await run_original(*args, **kwargs)
        finally:
            wake_sends.append((sent, time.time()))

    setattr(wakes_module, "run", timed_run)  # noqa: B010
    client = awa.AsyncClient(url, max_connections=inflight + 2)
    await client.insert(BenchNoop(seq=-1, t=time.time()), queue=QUEUE)
    recs: list[tuple[int, float, float]] = []
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task[None]] = set()

    async def one(seq: int) -> None:
        try:
            called = time.time()
            job = await client.insert(BenchNoop(seq=seq, t=called), queue=QUEUE)
            recs.append((job.id, called, time.time()))
        finally:
            sem.release()

    start = time.monotonic()
    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if time.monotonic() - start > seconds:
            break
        await sem.acquire()
        task = asyncio.create_task(one(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    await client.close()
    Path(out).write_text(json.dumps({"recs": recs, "wake_sends": wake_sends}))


#: Run the processes on the host's own network (``--loopback``), not in host 1's namespace.
_LOOPBACK: list[bool] = [False]


def _spawn(*args: str) -> subprocess.Popen[str]:
    inside = [] if _LOOPBACK[0] else ["ip", "netns", "exec", _ns(1)]
    return subprocess.Popen(
        [*inside, sys.executable, "-m", "benchmarks.pickup_breakdown", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"p50 {percentile(values, 0.5):6.1f}  p90 {percentile(values, 0.9):6.1f}"
        f"  p99 {percentile(values, 0.99):6.1f}"
    )


def analyse(worker: dict[str, Any], producer: dict[str, Any]) -> dict[str, Any]:
    """Split each job's pickup into its parts (milliseconds)."""
    starts = {int(i): float(t) for i, t in worker["starts"]}
    claimed_by: dict[int, tuple[float, float]] = {}
    claims = [e for e in worker["events"] if e[0] == "claim"]
    for _, sent, returned, ids, _at_notification in claims:
        for job_id in ids:
            claimed_by[int(job_id)] = (sent, returned)
    waits = sorted((e[1], bool(e[2]), float(e[3])) for e in worker["events"] if e[0] == "waited")
    notified = sorted(e[1] for e in worker["events"] if e[0] == "notified")
    parts: dict[str, list[float]] = {
        k: [] for k in ("pickup", "call", "to_claim", "claim", "hand_off", "to_notified")
    }
    woken_by: dict[str, int] = {}
    for job_id, called, heard in producer["recs"]:
        if job_id not in starts or job_id not in claimed_by:
            continue
        sent, returned = claimed_by[job_id]
        parts["pickup"].append((starts[job_id] - heard) * 1000)
        parts["call"].append((heard - called) * 1000)
        parts["to_claim"].append((sent - heard) * 1000)
        parts["claim"].append((returned - sent) * 1000)
        parts["hand_off"].append((starts[job_id] - returned) * 1000)
        after = [t for t in notified if t >= called]
        if after:
            parts["to_notified"].append((after[0] - heard) * 1000)
        # The last wait that ended at most 1 ms before the claim was sent.
        before = [w for w in waits if w[0] <= sent + 0.0005 and sent - w[0] < 0.002]
        if not before:
            cause = "no wait"
        elif before[-1][1]:
            cause = "woken"
        else:
            cause = "timer"
        woken_by[cause] = woken_by.get(cause, 0) + 1
    sizes = [len(c[3]) for c in claims]
    at_notification = [c for c in claims if c[4]]
    after_empty = _after_empty(claims)
    return {
        "jobs": len(parts["pickup"]),
        "claims": len(claims),
        "empty_claims": sum(1 for s in sizes if s == 0),
        "jobs_per_claim": round(statistics.mean(sizes), 2) if sizes else 0,
        "claims_at_notification": len(at_notification),
        "empty_at_notification": sum(1 for c in at_notification if not c[3]),
        "after_empty": _summary(after_empty),
        "wake_statements": len(producer["wake_sends"]),
        "woken_by": woken_by,
        "parts": {k: _summary(v) for k, v in parts.items()},
        "raw": {
            k: [round(percentile(v, q), 2) for q in (0.5, 0.9, 0.99)] for k, v in parts.items() if v
        },
    }


def _after_empty(claims: list[Any]) -> list[float]:
    """For each claim sent at a notification that came back empty while a loop's claim
    was in flight: ms from that loop's claim coming back to the next claim sent."""
    ordered = sorted(claims, key=lambda c: c[1])
    loops = [c for c in ordered if not c[4]]
    gaps = []
    for claim in ordered:
        if not claim[4] or claim[3]:
            continue
        beside = [c for c in loops if c[1] < claim[1] < c[2]]
        if not beside:
            continue
        back = beside[0][2]
        later = [c[1] for c in ordered if c[1] >= back and c is not claim]
        if later:
            gaps.append((later[0] - back) * 1000)
    return gaps


def one_run(admin: str, rate: float, seconds: float, tmp: Path, ahead: bool) -> dict[str, Any]:
    db = "pickup_breakdown"
    fresh(admin, db)
    asyncio.run(enqueue_backlog(_db_url(db, None), 0))
    worker_out, producer_out = tmp / "worker.json", tmp / "producer.json"
    url = _db_url(db, None if _LOOPBACK[0] else 1)
    worker = _spawn("worker", "--url", url, "--out", str(worker_out), "--ahead", str(int(ahead)))
    try:
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "READY":
            raise RuntimeError("the worker did not start")
        producer = _spawn(
            "produce", "--url", url, "--rate", str(rate),
            "--seconds", str(seconds), "--out", str(producer_out),
        )  # fmt: skip
        producer.wait(timeout=seconds + READY_TIMEOUT)
        # the last jobs' handlers
        time.sleep(2.0)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=READY_TIMEOUT)
    return analyse(json.loads(worker_out.read_text()), json.loads(producer_out.read_text()))


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("worker")
    w.add_argument("--url", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--ahead", type=int, default=1)
    pr = sub.add_parser("produce")
    pr.add_argument("--url", required=True)
    pr.add_argument("--rate", type=float, required=True)
    pr.add_argument("--seconds", type=float, required=True)
    pr.add_argument("--inflight", type=int, default=8)
    pr.add_argument("--out", required=True)
    p.add_argument("--server", default="127.0.0.1:5432")
    p.add_argument("--rtt", default="0,1,5,20")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--json", type=Path, default=None, help="append each run's figures here")
    p.add_argument(
        "--ahead",
        default="on",
        help="claims ahead: on, off, or on,off / off,on (both, in that order, at each round trip)",
    )
    p.add_argument("--repeat", type=int, default=1, help="runs of the whole round-trip list")
    p.add_argument(
        "--loopback", action="store_true", help="on this host's network, no namespace (no root)"
    )
    args = p.parse_args()
    if args.command == "worker":
        asyncio.run(_worker(args.url, args.out, bool(args.ahead)))
        return
    if args.command == "produce":
        asyncio.run(_producer(args.url, args.rate, args.seconds, args.inflight, args.out))
        return
    host, port = args.server.rsplit(":", 1)
    _SERVER[:] = [host, int(port)]
    admin = _db_url("postgres", None)
    _LOOPBACK[0] = args.loopback
    try:
        if not args.loopback:
            make_links(1)
        with tempfile.TemporaryDirectory() as tmp_name:
            arms = [arm == "on" for arm in args.ahead.split(",")]
            rtts = [0.0] if args.loopback else [float(x) for x in args.rtt.split(",")]
            for run, rtt, ahead in itertools.product(range(args.repeat), rtts, arms):
                with contextlib.nullcontext() if args.loopback else links_with_rtt(1, rtt):
                    seen = 0.0 if args.loopback else measured_rtt_ms(1)
                    got = one_run(admin, args.rate, args.seconds, Path(tmp_name), ahead)
                    got.update(rtt_ms=rtt, select1_ms=round(seen, 2), load=_load())
                    got.update(at=time.strftime("%H:%M:%S"), ahead=ahead, run=run + 1)
                    link = "loopback" if args.loopback else f"rtt {rtt:g} ms"
                    print(
                        f"run {run + 1} {link} ahead {'on' if ahead else 'off'} "
                        f"(SELECT 1 {seen:.2f} ms, load {got['load']}): "
                        f"{got['jobs']} jobs, {got['claims']} claims "
                        f"({got['empty_claims']} empty, {got['jobs_per_claim']} jobs each), "
                        f"{got['wake_statements']} wake statements, woken by {got['woken_by']}; "
                        f"{got['claims_at_notification']} claims at a notification beside "
                        f"the loop's, {got['empty_at_notification']} of them empty"
                    )
                    for name, text in got["parts"].items():
                        print(f"    {name:12s} {text}")
                    print(f"    {'after_empty':12s} {got['after_empty']}")
                    if args.json is not None:
                        with args.json.open("a") as f:
                            f.write(json.dumps(got) + "\n")
    finally:
        if not args.loopback:
            remove_links()


if __name__ == "__main__":
    main()
