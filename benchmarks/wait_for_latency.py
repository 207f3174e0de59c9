"""``wait_for`` latency: from a handler's return to the waiter's wake-up, at a steady rate.

Separate processes, as in a deployment: one worker process (queue ``results``, a task
with ``store_result=True`` whose result carries the instant the handler returned) and
``--producers`` producer processes, each offering its share of ``--rate`` jobs a second
for ``--seconds`` (up to ``--in-flight`` inserts outstanding at once, so a slow insert
does not hold back the next due one) and waiting on each job it inserted with
``client.wait_for`` (``--pool`` connections per producer process, shared by its inserts
and its waiters' reads). Each job is due ``--lead`` seconds after its insert, so its waiter
is listening before it runs: the measured path is the notification after the
completion, not a first read. The instants are read from ``CLOCK_MONOTONIC``, one clock
for every process of the host.

Prints the offered rate, p50 / p90 / p99 / max of (waiter awake) - (handler returned),
how many waiters fell back to a poll (latency >= the 1 s poll), and where the time went
(medians): the handler's return to its result stored, to the announcement sent (the
completion batched, committed and acknowledged), the announcement's own statement, its
delivery to the waiter's listener, and the waiter's read of the answer.

    .venv/bin/python -m benchmarks.wait_for_latency --rate 200 --seconds 10
    .venv/bin/python -m benchmarks.wait_for_latency --rate 20 --seconds 10 --producers 1
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import awa
from awa.adapters._pg import results as pg_results
from benchmarks._common import drop_database, fresh_database, parser, percentile

QUEUE = "results"


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclasses.dataclass
class Echo:
    n: int


def _stamped(
    method: Callable[..., Awaitable[Any]], into: dict[int, list[float]]
) -> Callable[..., Awaitable[Any]]:
    """``method`` (a result store's, taking the job id first) noting when each call for a
    job began and ended."""

    async def wrapper(self: Any, job_id: int, *args: Any, **kwargs: Any) -> Any:
        began = _now()
        out = await method(self, job_id, *args, **kwargs)
        into[job_id] = [began, _now()]
        return out

    return wrapper


async def worker(url: str, workers: int) -> None:
    """Run the task until stdin closes, then print the stores' and announcements'
    instants by job id (JSON)."""
    stored: dict[int, list[float]] = {}
    announced: dict[int, list[float]] = {}
    store = pg_results.PgResultStore
    store.store_result = _stamped(  # type: ignore[method-assign,assignment]
        store.store_result, stored
    )
    store.announce_finished = _stamped(  # type: ignore[method-assign,assignment]
        store.announce_finished, announced
    )
    client = awa.AsyncClient(url, max_connections=20)

    @client.task(Echo, queue=QUEUE, store_result=True)
    async def echo(job: awa.Job[Echo]) -> dict[str, float]:
        return {"n": job.args.n, "returned": _now()}

    await client.start([(QUEUE, workers)], promote_interval_ms=20)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await client.shutdown()
    await client.close()
    print(json.dumps({"stored": stored, "announced": announced}), flush=True)


async def producer(
    url: str,
    rate: float,
    seconds: float,
    lead: float,
    in_flight: int,
    pool: int,
    first: int,
    step: int,
) -> None:
    """Insert jobs ``first``, ``first + step``, ... at ``rate``, wait on each, and print
    each one's return, listener-fired and awake instants (JSON)."""
    fired: dict[int, float] = {}
    fire = pg_results._Waiter.fire

    def noted(self: pg_results._Waiter, completed: bool = False) -> None:
        fired.setdefault(self.job_id, _now())
        fire(self, completed)

    pg_results._Waiter.fire = noted  # type: ignore[method-assign]
    client = awa.AsyncClient(url, max_connections=pool)
    rows: list[list[float]] = []
    slots = asyncio.Semaphore(in_flight)

    async def one(n: int) -> None:
        async with slots:
            run_at = datetime.now(UTC) + timedelta(seconds=lead)
            job = await client.insert(Echo(n=n), queue=QUEUE, run_at=run_at)
        result = await client.wait_for(job.id, timeout=60)
        awake = _now()
        assert result["n"] == n, result
        rows.append([float(job.id), result["returned"], fired.get(job.id, float("nan")), awake])

    total = int(rate * seconds)
    tasks: list[asyncio.Task[None]] = []
    started = _now()
    for k in range(total):
        delay = started + k / rate - _now()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(first + k * step)))
    offered_in = _now() - started
    await asyncio.gather(*tasks)
    await client.close()
    print(json.dumps({"rows": rows, "offered": total / offered_in}), flush=True)


def _spawn(role: str, url: str, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "benchmarks.wait_for_latency", "--role", role]
    return subprocess.Popen(
        [*command, "--url", url, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _last_json(proc: subprocess.Popen[str], out: str) -> dict[str, Any]:
    if proc.returncode != 0:
        raise SystemExit(f"a benchmark process exited with {proc.returncode}")
    parsed: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return parsed


def coordinate(args: argparse.Namespace) -> None:
    name = args.db or "awa_bench_wait_for"
    url = fresh_database(args.admin_url, name)
    try:

        async def migrate() -> None:
            setup = awa.AsyncClient(url, max_connections=2)
            await setup.migrate()
            await setup.close()

        asyncio.run(migrate())
        work = _spawn("worker", url, "--workers", str(args.workers))
        assert work.stdout is not None
        if work.stdout.readline().strip() != "ready":
            raise SystemExit("the worker process did not start")
        share = args.rate / args.producers
        producers = [
            _spawn(
                "producer",
                url,
                *("--rate", str(share), "--seconds", str(args.seconds)),
                *("--lead", str(args.lead), "--in-flight", str(args.in_flight)),
                *("--pool", str(args.pool)),
                *("--first", str(p), "--step", str(args.producers)),
            )
            for p in range(args.producers)
        ]
        outputs = [(p, p.communicate()[0]) for p in producers]
        rows: list[list[float]] = []
        offered = 0.0
        for proc, out in outputs:
            answer = _last_json(proc, out)
            rows.extend(answer["rows"])
            offered += float(answer["offered"])
        out, _ = work.communicate("")
        instants = _last_json(work, out)
    finally:
        drop_database(args.admin_url, name)

    stored = {int(k): v for k, v in instants["stored"].items()}
    announced = {int(k): v for k, v in instants["announced"].items()}
    latencies = [(awake - returned) * 1000 for _, returned, _, awake in rows]
    polled = sum(1 for ms in latencies if ms >= 1000)
    print(
        f"jobs {len(rows)}, offered {offered:.0f}/s by {args.producers} producer process(es), "
        f"lead {args.lead:.2f} s"
    )
    print(
        "wait_for latency (handler return -> waiter awake), ms: "
        f"p50 {percentile(latencies, 0.50):.2f}  p90 {percentile(latencies, 0.90):.2f}  "
        f"p99 {percentile(latencies, 0.99):.2f}  max {max(latencies):.2f}; "
        f"woken by a poll: {polled}"
    )
    parts: dict[str, list[float]] = {
        "return -> result stored": [],
        "stored -> announcement sent (completion committed)": [],
        "announcement statement": [],
        "announced -> listener woken": [],
        "listener woken -> waiter awake (re-read)": [],
    }
    for job_id, returned, fired, awake in rows:
        store = stored.get(int(job_id))
        sent = announced.get(int(job_id))
        if store is None or sent is None or fired != fired:
            continue
        parts["return -> result stored"].append(store[1] - returned)
        parts["stored -> announcement sent (completion committed)"].append(sent[0] - store[1])
        parts["announcement statement"].append(sent[1] - sent[0])
        parts["announced -> listener woken"].append(fired - sent[1])
        parts["listener woken -> waiter awake (re-read)"].append(awake - fired)
    for label, values in parts.items():
        ms = [v * 1000 for v in values]
        print(f"  {label}: p50 {percentile(ms, 0.50):.2f}  p99 {percentile(ms, 0.99):.2f} ms")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--lead", type=float, default=0.3, help="seconds each job is due after insert")
    p.add_argument("--producers", type=int, default=2, help="producer processes")
    p.add_argument("--in-flight", type=int, default=8, help="inserts outstanding per producer")
    p.add_argument("--pool", type=int, default=20, help="connections per producer process")
    p.add_argument("--workers", type=int, default=20, help="the worker process's slots")
    p.add_argument("--role", choices=("coordinator", "worker", "producer"), default="coordinator")
    p.add_argument("--url", default="", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--step", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "worker":
        asyncio.run(worker(args.url, args.workers))
    elif args.role == "producer":
        asyncio.run(
            producer(
                args.url,
                args.rate,
                args.seconds,
                args.lead,
                args.in_flight,
                args.pool,
                args.first,
                args.step,
            )
        )
    else:
        coordinate(args)


if __name__ == "__main__":
    main()
