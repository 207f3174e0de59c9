"""Bounded storage beside live work: a long job, a waiting callback and an unworked
backlog next to a steady stream of short jobs, on a fresh database with the default ring
(16 slots x 1 s, lease ring 8 x 250 ms), the leader's cadence and seal rule, and the
queue-storage engine in schema ``awa``.

Second by second it prints (and with ``--csv`` writes) the completed rows visible in
``awa.jobs`` (as completed closures; the view itself is counted at the end), the
schema's total relation size, its dead tuples (``n_dead_tup``), the
size of ``queue_counts``, the claim latency (p50 / p99 / max of that second's claims)
and the leader's prune outcomes. After the first ring turn the first three stay flat
when nothing pins the ring. At the end the long job and the waiting callback are
completed and the backlog is checked intact.

``--hold xid`` or ``--hold rr`` opens, ``--hold-at`` seconds in and for ``--hold-for``
seconds, a session that holds an xid (``BEGIN; SELECT txid_current()``) or a REPEATABLE
READ snapshot that read ``awa.jobs`` (ADR 0006, "Long transactions").

    .venv/bin/python -m benchmarks.reclaim_live_work --duration 600 --rate 500
    .venv/bin/python -m benchmarks.reclaim_live_work --duration 120 --rate 150 --hold rr
"""

from __future__ import annotations

import csv
import logging
import time
from datetime import timedelta
from typing import Any

import anyio
import psycopg

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.domain.policies import RingSeal
from awa.ports.storage import Ack
from benchmarks._common import drop_database, fresh_database, parser, percentile

BACKLOG = 200
LONG_SECONDS = 75.0


def _sample(conn: psycopg.Connection[Any]) -> dict[str, int]:
    row = conn.execute(
        # Completed rows visible in awa.jobs: here every completion is a `completed`
        # closure of the ring (the view resolves each to one row); counting through the
        # view itself takes seconds once it holds 100k rows, and a reader that slow is
        # the long transaction that stops prune (measured separately with --hold rr).
        "SELECT (SELECT count(*) FROM awa.closures WHERE outcome = 'completed'), "
        "(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "  WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p')), "
        "(SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
        "  WHERE schemaname = 'awa'), "
        "pg_total_relation_size('awa.queue_counts'), "
        "(SELECT generation FROM awa.ring_state)"
    ).fetchone()
    assert row is not None
    return {
        "completed_visible": int(row[0]),
        "schema_bytes": int(row[1]),
        "dead_tuples": int(row[2]),
        "queue_counts_bytes": int(row[3]),
        "generation": int(row[4]),
    }


async def run(args: Any, url: str) -> list[dict[str, Any]]:
    engine = await QueueStorageEngine.open(url, clock=SystemClock(), max_connections=12)
    leader = await QueueStorageEngine.open(url, clock=SystemClock(), max_connections=3)
    stop = anyio.Event()
    claim_ms: list[float] = []
    outcomes: dict[str, int] = {}
    produced = completed = 0
    rows: list[dict[str, Any]] = []
    try:
        # The live work that used to pin the ring: a long attempt (heartbeating), one
        # waiting for a callback, and a backlog nobody serves.
        (long_job,) = await engine.enqueue_many([JobSpec(kind="long", queue="long")])
        (long_claim,) = await engine.claim("long", limit=1, deadline=timedelta(minutes=5))
        (cb_job,) = await engine.enqueue_many([JobSpec(kind="cb", queue="callbacks")])
        (cb_claim,) = await engine.claim("callbacks", limit=1)
        assert (
            await engine.register_callback(
                cb_claim.lease, callback_id="bench-cb", timeout=timedelta(hours=1)
            )
            == Ack.APPLIED
        )
        assert await engine.wait_for_callback(cb_claim.lease) == Ack.APPLIED
        backlog = await engine.enqueue_many(
            [JobSpec(kind="idle", queue="unworked") for _ in range(BACKLOG)]
        )
        started = time.monotonic()

        async def producer() -> None:
            nonlocal produced
            tick = 0.05
            per_tick = args.rate * tick
            owed = 0.0
            next_at = time.monotonic()
            while not stop.is_set():
                owed += per_tick
                n = int(owed)
                if n:
                    owed -= n
                    await engine.enqueue_many([JobSpec(kind="short", queue="short")] * n)
                    produced += n
                next_at += tick
                await anyio.sleep(max(0.0, next_at - time.monotonic()))

        async def worker() -> None:
            nonlocal completed
            while not stop.is_set():
                t0 = time.perf_counter()
                claims = await engine.claim("short", limit=64)
                claim_ms.append((time.perf_counter() - t0) * 1000)
                if not claims:
                    await anyio.sleep(0.005)
                    continue
                await engine.complete([c.lease for c in claims])
                completed += len(claims)

        async def long_handler() -> None:
            # heartbeats every 5 s, as the runtime does, and finishes after LONG_SECONDS
            while time.monotonic() - started < min(LONG_SECONDS, args.duration - 1):
                await engine.heartbeat([long_claim.lease])
                await anyio.sleep(5)
            assert await engine.complete([long_claim.lease]) == [Ack.APPLIED]
            print(f"long job completed at {time.monotonic() - started:.0f}s", flush=True)

        async def ring() -> None:
            # One leader loop, as the runtime's: the lease ring every 250 ms, the queue
            # ring every second (both lock ring_state, so they never run side by side),
            # turned by the leader's rule (once its slot is full or old).
            seal = RingSeal(interval=timedelta(seconds=1))
            every = seal.interval.total_seconds()
            next_queue = next_lease = time.monotonic()
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_queue:
                    next_queue = now + every
                    for word in (await leader.prune(), await leader.rotate(seal=seal)):
                        outcomes[word] = outcomes.get(word, 0) + 1
                if now >= next_lease:
                    next_lease = now + 0.25
                    await leader.prune_leases()
                    await leader.rotate_leases()
                await anyio.sleep(max(0.0, min(next_queue, next_lease) - time.monotonic()))

        async def holder() -> None:
            if args.hold == "none":
                return
            await anyio.sleep(args.hold_at)
            async with await psycopg.AsyncConnection.connect(url) as conn:
                if args.hold == "rr":
                    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    await conn.execute("SELECT count(*) FROM awa.jobs")
                else:
                    await conn.execute("BEGIN")
                    await conn.execute("SELECT txid_current()")
                print(f"holding ({args.hold}) from {time.monotonic() - started:.0f}s", flush=True)
                await anyio.sleep(args.hold_for)
                await conn.execute("COMMIT")
                print(f"released at {time.monotonic() - started:.0f}s", flush=True)

        async def sampler() -> None:
            seen = 0
            last_outcomes: dict[str, int] = {}
            with psycopg.connect(url, autocommit=True) as conn:
                for second in range(1, int(args.duration) + 1):
                    await anyio.sleep(max(0.0, started + second - time.monotonic()))
                    lat = claim_ms[seen:]
                    seen += len(lat)
                    sample = await anyio.to_thread.run_sync(_sample, conn)
                    delta = {k: v - last_outcomes.get(k, 0) for k, v in outcomes.items()}
                    last_outcomes = dict(outcomes)
                    row = {
                        "second": second,
                        # when the sample was taken (a loaded host makes the sampler late)
                        "t": round(time.monotonic() - started, 1),
                        "produced": produced,
                        "completed": completed,
                        **sample,
                        "claim_p50_ms": round(percentile(lat, 0.5), 2),
                        "claim_p99_ms": round(percentile(lat, 0.99), 2),
                        "claim_max_ms": round(max(lat, default=float("nan")), 2),
                        "prune": ",".join(f"{k}:{v}" for k, v in sorted(delta.items()) if v),
                    }
                    rows.append(row)
                    if second % args.print_every == 0:
                        print(
                            f"{second:4d}s t={row['t']}s done={completed} "
                            f"visible={row['completed_visible']} "
                            f"schema={sample['schema_bytes'] / 1e6:.2f}MB "
                            f"dead={row['dead_tuples']} "
                            f"qc={sample['queue_counts_bytes'] / 1e3:.0f}kB "
                            f"gen={row['generation']} claim p50/p99/max="
                            f"{row['claim_p50_ms']}/{row['claim_p99_ms']}/{row['claim_max_ms']}"
                            f"ms {row['prune']}",
                            flush=True,
                        )
            stop.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            for _ in range(args.workers):
                tg.start_soon(worker)
            tg.start_soon(long_handler)
            tg.start_soon(ring)
            tg.start_soon(holder)
            tg.start_soon(sampler)

        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
            print(f"completed rows in awa.jobs at the end: {row[0] if row else None}", flush=True)
        resolved = await engine.resolve_callback("bench-cb", action="complete")
        long_done = await engine.get_job(long_job.id)
        still = await engine.claim("unworked", limit=BACKLOG + 1)
        print(
            f"end: produced={produced} completed={completed}; long job "
            f"{long_done.state.name if long_done else 'pruned after completing'}; "
            f"callback job {cb_job.id} {resolved.state.name}; backlog intact: "
            f"{sorted(c.job.id for c in still) == sorted(j.id for j in backlog)}; "
            f"prune outcomes {outcomes}",
            flush=True,
        )
    finally:
        await engine.close()
        await leader.close()
    return rows


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    p.add_argument("--rate", type=float, default=500.0, help="short jobs offered per second")
    p.add_argument("--workers", type=int, default=2, help="claim/complete loops")
    p.add_argument("--hold", choices=("none", "xid", "rr"), default="none")
    p.add_argument("--hold-at", type=float, default=30.0)
    p.add_argument("--hold-for", type=float, default=60.0)
    p.add_argument("--print-every", type=int, default=5)
    p.add_argument("--csv", default=None, help="write the per-second rows here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    name = args.db or "awa_bench_reclaim"
    url = fresh_database(args.admin_url, name)
    try:
        rows = anyio.run(run, args, url)
    finally:
        drop_database(args.admin_url, name)
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
