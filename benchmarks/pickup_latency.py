"""Pickup latency at a steady offered rate, split into its stages.

Mirrors the harness's latency workload: a producer process offers ``--rate`` single
``insert()`` calls per second (at most ``--inflight`` at once) for ``--seconds`` while one
worker (64 slots) runs in this process. Pickup is the producer's commit (``insert()``
returned) to the handler's start. Each job's pickup is split into

* ``to_claim``: commit until the claim that took it was sent (wake-up delivery, and any
  claim still in flight),
* ``claim``: that claim's round trip,
* ``to_handler``: the claim's return until the handler started (task hand-off),

The slowest 1 % is sorted by what overlapped it: the first two seconds of load (new
connections and cold caches), a garbage collection over 2 ms in the worker, a ring prune (its
partition swap makes every backend plan the ring statements again) or a rotation. Then
the slowest jobs are listed with everything that was going on (notifications, other
claims, event-loop lag, collections, maintenance duties). Only for profiling: the timing
hooks wrap the engine's ``claim``, its ring duties and the subscription's ``wait`` in this
process.

With ``--waits`` a third process samples ``pg_stat_activity`` about every millisecond, and
the claims slower than 5 ms are broken down by what the claiming backend was doing
(``CPU`` for running or runnable, else its wait event): WAL waits there mean the claim
waited for a flush, ``Lock:relation`` a ring maintenance lock, no sample at all the
worker's own event loop.

    .venv/bin/python -m benchmarks.pickup_latency --rate 200 --seconds 20 [--waits]
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import statistics
import time
from typing import Any

import psycopg

import awa
from awa.adapters._pg import notifier as pg_notifier
from awa.adapters.postgres_queue_storage import engine as qs_core
from awa.adapters.postgres_queue_storage import statements as qs_statements
from benchmarks._common import by_second, drop_database, fresh_database, parser
from benchmarks._common import percentile as _pct
from benchmarks.drain import QUEUE, BenchNoop, enqueue_backlog

#: The claim statements, as the sampler sees them (their leading comment).
_CLAIM_TEXT = ("-- The claim as one ring", "-- The common claim", "-- The general claim")
_SLOW_CLAIM = 0.005


def _sample_waits(url: str, seconds: float, out: Any) -> None:
    """Active backends of the scratch database, about every millisecond for ``seconds``:
    (time, wait event or CPU, whether the statement is a claim)."""
    samples: list[tuple[float, str, bool]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        end = time.time() + seconds
        while time.time() < end:
            rows = conn.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8, "
                "coalesce(wait_event_type || ':' || wait_event, 'CPU'), left(query, 24) "
                "FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state = 'active'"
            ).fetchall()
            samples += [(t, event, query.startswith(_CLAIM_TEXT)) for t, event, query in rows]
            time.sleep(0.001)
    out.send(samples)


def _claim_waits(
    claims: list[tuple[float, float, list[int]]], samples: list[tuple[float, str, bool]]
) -> None:
    slow = [(t0, t1) for t0, t1, _ in claims if t1 - t0 > _SLOW_CLAIM]
    seen: dict[str, int] = {}
    unsampled = 0
    for t0, t1 in slow:
        events = [event for t, event, claim in samples if claim and t0 <= t <= t1]
        unsampled += not events
        for event in events:
            seen[event] = seen.get(event, 0) + 1
    print(
        f"claims over {_SLOW_CLAIM * 1000:.0f} ms: {len(slow)}; claiming backend samples "
        f"{dict(sorted(seen.items(), key=lambda kv: -kv[1]))}; never seen active: {unsampled}"
    )
    everyone: dict[str, int] = {}
    for _, event, _ in samples:
        everyone[event] = everyone.get(event, 0) + 1
    print(f"all active backends: {dict(sorted(everyone.items(), key=lambda kv: -kv[1])[:8])}")


async def offer_inserts(
    url: str, rate: float, seconds: float, inflight: int, *, stop_at_deadline: bool = False
) -> list[tuple[int, float, float]]:
    """The harness's latency producer: ``rate`` single ``insert()`` calls per second with
    at most ``inflight`` at once, ``(seq, call time, commit time)`` for each. With
    ``stop_at_deadline`` it offers nothing after ``seconds`` (a slow link then limits how
    many are offered instead of stretching the run)."""
    client = awa.AsyncClient(url, max_connections=inflight + 2)
    await client.insert(BenchNoop(seq=-1, t=time.time()), queue=QUEUE)  # warm the pool
    recs: list[tuple[int, float, float]] = []
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task[None]] = set()

    async def one(seq: int) -> None:
        try:
            t_call = time.time()
            await client.insert(BenchNoop(seq=seq, t=t_call), queue=QUEUE)
            recs.append((seq, t_call, time.time()))
        finally:
            sem.release()

    start = time.monotonic()
    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if stop_at_deadline and time.monotonic() - start > seconds:
            break
        await sem.acquire()
        task = asyncio.create_task(one(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    await client.close()
    return recs


def _produce(url: str, rate: float, seconds: float, inflight: int, out: Any) -> None:
    out.send(asyncio.run(offer_inserts(url, rate, seconds, inflight)))


async def run(
    url: str, rate: float, seconds: float, inflight: int, slowest: int, waits: bool = False
) -> None:
    # As the harness's setup phase: migrate, then one short worker start (a first
    # deployment activates the default storage engine), in its own client.
    await enqueue_backlog(url, 0)

    claims: list[tuple[float, float, list[int]]] = []
    wakes: list[float] = []
    starts: dict[int, float] = {}

    original_claim = qs_core.QueueStorageEngine.claim
    original_run_generic = qs_statements.Statements.run_generic
    # Claim statements each claim call ran: more than one when it crossed a rotation
    # (its slot said `elsewhere`, and the current slot or the whole ring was tried next).
    statements_of: list[int] = []

    async def counted_run_generic(self: Any, conn: Any, statement: bytes, params: Any) -> Any:
        if statement.startswith(_CLAIM_TEXT[0].encode()) and params.get("queue"):
            statements_of[-1] += 1
        return await original_run_generic(self, conn, statement, params)

    original_wait = pg_notifier.PostgresSubscription.wait

    async def timed_claim(self: Any, queue: str, **kw: Any) -> Any:
        statements_of.append(0)
        t0 = time.time()
        out = await original_claim(self, queue, **kw)
        claims.append((t0, time.time(), [c.job.args["seq"] for c in out]))
        crossed.append(statements_of[-1] > 1)
        return out

    crossed: list[bool] = []

    async def timed_wait(self: Any, timeout: float) -> set[str]:
        fired = await original_wait(self, timeout)
        if fired:
            wakes.append(time.time())
        return fired

    duties: list[tuple[str, float, float, str]] = []
    originals = {
        name: getattr(qs_core.QueueStorageEngine, name)
        for name in ("rotate", "prune", "rotate_leases", "prune_leases", "promote_due")
    }

    def timed_duty(name: str) -> Any:
        original = originals[name]

        async def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            t0 = time.time()
            out = await original(self, *args, **kw)
            duties.append((name, t0, time.time(), str(out)))
            return out

        return wrapper

    for name in originals:
        setattr(qs_core.QueueStorageEngine, name, timed_duty(name))
    qs_core.QueueStorageEngine.claim = timed_claim  # type: ignore[method-assign]
    qs_statements.Statements.run_generic = counted_run_generic  # type: ignore[method-assign]
    pg_notifier.PostgresSubscription.wait = timed_wait  # type: ignore[method-assign]
    worker = awa.AsyncClient(url, max_connections=20)

    @worker.task(BenchNoop, queue=QUEUE)
    async def handle(job: Any) -> None:
        starts[job.args.seq] = time.time()

    lag: list[tuple[float, float]] = []
    collections: list[tuple[int, float, float]] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.time()
        else:
            collections.append((info["generation"], gc_started[0], time.time()))

    gc.callbacks.append(on_gc)

    async def ticker() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.001)
            lag.append((time.time(), time.monotonic() - t - 0.001))

    await worker.start(
        [{"name": QUEUE, "max_workers": 64, "claim_batch_size": 512}], poll_interval_ms=50
    )
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(2.0)
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_produce, args=(url, rate, seconds, inflight, send))
    sampled, sample_send = ctx.Pipe(duplex=False)
    sampler = ctx.Process(target=_sample_waits, args=(url, seconds + 2, sample_send))
    if waits:
        sampler.start()
    proc.start()
    while not recv.poll():
        await asyncio.sleep(0.05)
    recs: list[tuple[int, float, float]] = recv.recv()
    proc.join()
    samples: list[tuple[float, str, bool]] = []
    if waits:
        while not sampled.poll():
            await asyncio.sleep(0.05)
        samples = sampled.recv()
        sampler.join()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(s in starts for s, _, _ in recs):
        await asyncio.sleep(0.05)
    tick.cancel()
    pool = getattr((await worker._wiring()).engine, "pool", None)
    if pool is not None:
        stats = pool.get_stats()
        print(f"worker pool: size {stats.get('pool_size')} max used {stats.get('pool_max')}")
    await worker.shutdown(timeout_ms=5000)
    await worker.close()
    qs_core.QueueStorageEngine.claim = original_claim  # type: ignore[method-assign]
    qs_statements.Statements.run_generic = original_run_generic  # type: ignore[method-assign]
    pg_notifier.PostgresSubscription.wait = original_wait  # type: ignore[method-assign]
    for name, original in originals.items():
        setattr(qs_core.QueueStorageEngine, name, original)

    claim_of: dict[int, tuple[float, float, int]] = {}
    for t0, t1, seqs in claims:
        for s in seqs:
            claim_of[s] = (t0, t1, len(seqs))
    rows: list[dict[str, Any]] = []
    for seq, _t_call, t_commit in recs:
        if seq not in starts or seq not in claim_of:
            continue
        t0, t1, size = claim_of[seq]
        rows.append(
            {
                "seq": seq,
                "pickup": (starts[seq] - t_commit) * 1000,
                "to_claim": (t0 - t_commit) * 1000,
                "claim": (t1 - t0) * 1000,
                "to_handler": (starts[seq] - t1) * 1000,
                "batch": size,
                "t_commit": t_commit,
            }
        )
    print(f"jobs {len(recs)} picked {len(rows)} claims {len(claims)} wakes {len(wakes)}")
    for key in ("pickup", "to_claim", "claim", "to_handler"):
        vals = [r[key] for r in rows]
        print(
            f"{key:>10}: p50 {_pct(vals, 0.5):6.2f}  p90 {_pct(vals, 0.9):6.2f}  "
            f"p99 {_pct(vals, 0.99):6.2f}  max {max(vals):7.2f}  mean {statistics.mean(vals):6.2f}"
        )
    settled = [r["pickup"] for r in rows if r["seq"] >= 2 * rate]
    early = sorted((r["pickup"] for r in rows if r["seq"] < 2 * rate), reverse=True)
    print(
        f"pickup after the first 2 s: p50 {_pct(settled, 0.5):.2f} p99 {_pct(settled, 0.99):.2f}"
        f"; slowest of the first 2 s: {[round(v, 1) for v in early[:5]]}"
    )
    claim_ms = [(t1 - t0) * 1000 for t0, t1, _ in claims]
    print(
        f"claims: p50 {_pct(claim_ms, 0.5):.2f} p99 {_pct(claim_ms, 0.99):.2f} ms, "
        f"empty {sum(1 for c in claims if not c[2])}, mean batch "
        f"{statistics.mean(len(c[2]) for c in claims):.2f}"
    )
    across = sorted((t1 - t0) * 1000 for (t0, t1, _), x in zip(claims, crossed, strict=True) if x)
    if across:
        print(
            f"claims across a rotation (more than one claim statement): {len(across)}, "
            f"p50 {_pct(across, 0.5):.2f} max {across[-1]:.2f} ms"
        )
    if waits:
        _claim_waits(claims, samples)
    lags = [v * 1000 for _, v in lag]
    print(f"loop lag: p50 {_pct(lags, 0.5):.2f} p99 {_pct(lags, 0.99):.2f} max {max(lags):.2f} ms")
    gc.callbacks.remove(on_gc)
    for generation in (0, 1, 2):
        ms = [(t1 - t0) * 1000 for g, t0, t1 in collections if g == generation]
        if ms:
            print(f"gc gen{generation}: n={len(ms)} p50 {_pct(ms, 0.5):.2f} max {max(ms):.2f} ms")
    by_duty: dict[str, list[float]] = {}
    for n, t0, t1, out in duties:
        by_duty.setdefault(f"{n}:{out}", []).append((t1 - t0) * 1000)
    for key, ms in sorted(by_duty.items()):
        print(f"duty {key}: n={len(ms)} p50 {_pct(ms, 0.5):.1f} max {max(ms):.1f} ms")
    worst = sorted(rows, key=lambda r: -r["pickup"])[: max(1, len(rows) // 100)]
    causes: dict[str, int] = {}
    for r in worst:
        tc, end = r["t_commit"], r["t_commit"] + r["pickup"] / 1000
        if r["seq"] < 2 * rate:
            cause = "first 2 s"
        elif any(t0 < end and t1 > tc - 0.002 and t1 - t0 > 0.002 for _, t0, t1 in collections):
            cause = "gc"
        elif any(
            n == "prune" and o == "pruned" and t0 < end and t1 > tc - 0.05
            for n, t0, t1, o in duties
        ):
            cause = "within 50 ms after a prune"
        elif any(
            n == "rotate" and o == "rotated" and t0 < end and t1 > tc - 0.02
            for n, t0, t1, o in duties
        ):
            cause = "within 20 ms after a rotation"
        else:
            cause = "other"
        causes[cause] = causes.get(cause, 0) + 1
    print(
        f"slowest 1% ({len(worst)} jobs, from {worst[-1]['pickup']:.2f} ms)"
        f" by what overlapped: {causes}"
    )
    print(f"slowest 1% by second of load: {by_second((r['seq'] for r in worst), rate)}")
    print(f"slowest {slowest}:")
    for r in sorted(rows, key=lambda r: -r["pickup"])[:slowest]:
        tc = r["t_commit"]
        prev = [c for c in claims if c[0] <= tc + r["to_claim"] / 1000 and c[1] > tc - 0.05]
        near_wake = [round((w - tc) * 1000, 2) for w in wakes if -0.01 < w - tc < 0.05]
        worst_lag = max((v * 1000 for t, v in lag if -0.01 < t - tc < 0.05), default=0.0)
        during = [
            f"gc{g}:{(t1 - t0) * 1000:.1f}ms"
            for g, t0, t1 in collections
            if t0 < tc + r["pickup"] / 1000 and t1 > tc - 0.002
        ] + [
            f"{n}:{out}:{(t1 - t0) * 1000:.1f}ms@{(t0 - tc) * 1000:+.1f}"
            for n, t0, t1, out in duties
            if t0 < tc + r["pickup"] / 1000 and t1 > tc - 0.002
        ]
        print(
            json.dumps(
                {
                    k: round(v, 2) if isinstance(v, float) else v
                    for k, v in r.items()
                    if k != "t_commit"
                }
            ),
            f"wakes@{near_wake[:4]} overlapping-claims {len(prev)} max-lag {worst_lag:.1f}",
            " ".join(during),
        )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--inflight", type=int, default=8)
    p.add_argument("--slowest", type=int, default=15)
    p.add_argument("--waits", action="store_true", help="sample what the claiming backend waits on")
    a = p.parse_args()
    name = a.db or "awa_bench_pickup"
    url = fresh_database(a.admin_url, name)
    try:
        asyncio.run(run(url, a.rate, a.seconds, a.inflight, a.slowest, a.waits))
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
