"""Dead tuples, WAL and commits left by processing no-op jobs on the queue-storage engine.

Installs the engine into a scratch schema with autovacuum disabled on every table of it,
then enqueues, claims and completes ``--jobs`` no-op jobs in batches while rotating and
pruning the ring as the maintenance leader would, and prints the total ``n_dead_tup`` of
the schema's tables (and of its lease tables), WAL bytes and commits per job.

With ``--heartbeat`` every claimed job heartbeats twice before it completes and one in ten
also reports progress, as long-running handlers do; the lease ring is then rotated and
pruned per batch too (when the engine has one).

    .venv/bin/python benchmarks/dead_tuples.py postgresql://postgres@127.0.0.1/bench
    .venv/bin/python benchmarks/dead_tuples.py postgresql://postgres@127.0.0.1/bench --heartbeat
"""

from __future__ import annotations

import argparse
import time

import anyio
import psycopg

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.job import Claim, JobSpec

SCHEMA = "qs_bench"


def _stats(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        dead = conn.execute(
            "SELECT coalesce(sum(n_dead_tup), 0), "
            "coalesce(sum(n_dead_tup) FILTER (WHERE relname ~ '^leases(_[0-9]+)?$'), 0) "
            "FROM pg_stat_user_tables WHERE schemaname = %s",
            (SCHEMA,),
        ).fetchone()
        wal = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        commits = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert dead is not None and wal is not None and commits is not None
    return {
        "dead": int(dead[0]),
        "lease_dead": int(dead[1]),
        "wal": int(wal[0]),
        "commits": int(commits[0]),
    }


def _disable_autovacuum(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchall()
        for (name,) in rows:
            conn.execute(f"ALTER TABLE {name} SET (autovacuum_enabled = false)".encode())


async def _heartbeat(engine: QueueStorageEngine, claims: list[Claim]) -> None:
    """What long handlers do: heartbeat (twice, in chunks like the runtime's heartbeat
    loop) and, for one job in ten, report progress."""
    leases = [claim.lease for claim in claims]
    for _ in range(2):
        for start in range(0, len(leases), 100):
            await engine.heartbeat(leases[start : start + 100])
    for lease in leases[::10]:
        await engine.update_progress(lease, progress={"done": 1})


async def run(url: str, jobs: int, batch: int, heartbeat: bool) -> None:
    await install_queue_storage(url, SCHEMA, reset=True)
    _disable_autovacuum(url)
    engine = await QueueStorageEngine.open(url, clock=SystemClock(), schema=SCHEMA)
    before = _stats(url)
    started = time.monotonic()
    done = 0
    prune_outcomes: dict[str, int] = {}
    lease_outcomes: dict[str, int] = {}
    lease_ring = hasattr(engine, "rotate_leases")
    try:
        while done < jobs:
            size = min(batch, jobs - done)
            await engine.enqueue_many([JobSpec(kind="noop", queue="bench")] * size)
            claimed = 0
            while claimed < size:
                claims = await engine.claim("bench", limit=size - claimed)
                if heartbeat:
                    await _heartbeat(engine, claims)
                await engine.complete([claim.lease for claim in claims])
                claimed += len(claims)
            done += size
            # The leader's cadence, compressed: one rotate + one prune per batch.
            await engine.rotate_queue_ring()
            outcome = await engine.prune_oldest()
            prune_outcomes[outcome] = prune_outcomes.get(outcome, 0) + 1
            if heartbeat and lease_ring:
                # The lease ring turns four times as often (250 ms vs 1 s by default).
                for _ in range(4):
                    pruned = await engine.prune_leases()
                    rotated = await engine.rotate_leases()
                    for word in (pruned, rotated):
                        lease_outcomes[word] = lease_outcomes.get(word, 0) + 1
    finally:
        await engine.close()
    elapsed = time.monotonic() - started
    time.sleep(1.0)  # let the exited backends' table statistics land
    after = _stats(url)
    idle: dict[str, int] | None = None
    if heartbeat and lease_ring:
        # What the leader does in the next lease_slot_count x lease_rotate_interval (2 s by
        # default) with no new work: the ring turns once and truncates what the load left.
        engine = await QueueStorageEngine.open(url, clock=SystemClock(), schema=SCHEMA)
        try:
            for _ in range(8):
                await engine.prune_leases()
                await engine.rotate_leases()
        finally:
            await engine.close()
        time.sleep(1.0)
        idle = _stats(url)
    print(f"jobs processed:        {done}")
    print(f"elapsed:               {elapsed:.1f} s ({done / elapsed:.0f} jobs/s)")
    print(f"n_dead_tup (schema):   {after['dead']}")
    print(f"n_dead_tup (leases):   {after['lease_dead']}")
    if idle is not None:
        print(f"after one idle turn:   {idle['dead']} (leases: {idle['lease_dead']})")
    print(f"WAL bytes per job:     {(after['wal'] - before['wal']) / done:.0f}")
    print(f"commits per job:       {(after['commits'] - before['commits']) / done:.3f}")
    print(f"prune outcomes:        {prune_outcomes}")
    if heartbeat:
        print(f"lease ring outcomes:   {lease_outcomes if lease_ring else 'no lease ring'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="database URL (the benchmark uses schema qs_bench)")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument(
        "--heartbeat",
        action="store_true",
        help="every job heartbeats twice and one in ten reports progress",
    )
    args = parser.parse_args()
    anyio.run(run, args.url, args.jobs, args.batch, args.heartbeat)


if __name__ == "__main__":
    main()
