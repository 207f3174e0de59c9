"""How long one run of the maintenance leader's ``dependency_cleanup`` duty takes over
a large table of dependency edges (ADR 0032, "Retention"), the cost every run pays.

Migrates a scratch database and writes ``--edges`` edges (default 500,000) straight
into ``awa.job_dependencies``, two parents a child: of the children, ``--due`` (default
0) had every edge resolved past the retention and have no row left (finished and
reclaimed), so the duty prunes them; half of the rest were resolved an hour ago (within
the retention) and half still wait. Then runs the duty ``--runs`` times (default 5) on
the canonical engine and prints each run's wall time and what it pruned. With nothing
due, a run should read nothing but the index's empty range.

    .venv/bin/python -m benchmarks.edge_prune
    .venv/bin/python -m benchmarks.edge_prune --due 20000
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import timedelta

import psycopg

import awa
from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.dependencies import EDGE_RETENTION
from awa.domain.policies import Backoff
from awa.entrypoints.routing import postgres_control_plane
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import MaintenanceDuties
from benchmarks._common import drop_database, fresh_database, maybe_profile, parser

#: Child ids far above any job id the scratch database hands out.
FIRST_CHILD = 10_000_000_000


def write_edges(url: str, *, edges: int, due: int) -> None:
    children = edges // 2
    old = timedelta(days=1) + EDGE_RETENTION
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO awa.job_dependencies (child_id, parent_id, satisfied_at, on_failure)
            SELECT %(first)s + c, %(first)s * 2 + c * 2 + p,
                   CASE WHEN c < %(due)s THEN now() - %(old)s
                        WHEN c %% 2 = 0 THEN now() - interval '1 hour' END,
                   'cancel'
            FROM generate_series(0, %(children)s - 1) AS c, generate_series(0, 1) AS p
            """,
            {"first": FIRST_CHILD, "due": due, "old": old, "children": children},
        )
        conn.execute("VACUUM ANALYZE awa.job_dependencies")


async def run(url: str, *, runs: int) -> None:
    clock = SystemClock()
    engine = await CanonicalEngine.open(url, clock=clock, backoff=Backoff())
    pool = await open_pool(url, max_connections=2, min_connections=1)
    try:
        config = parse_start_args(None, handler_queues={"default"})
        duties = MaintenanceDuties(
            engine,
            config,
            InFlight(),
            fence=lambda: None,
            clock=clock,
            control=postgres_control_plane(pool, clock),
        ).schedule()
        (duty,) = [d for d in duties if d.name == "dependency_cleanup"]
        times: list[float] = []
        for i in range(runs):
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) AS n FROM awa.job_dependencies")
                left = (await cur.fetchone() or {"n": 0})["n"]
            started = time.perf_counter()
            more = await duty.run()
            took = time.perf_counter() - started
            times.append(took)
            print(f"run {i + 1}: {took * 1000:8.1f} ms  edges before {left:,}  more={more}")
        print(
            f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms, "
            f"load {os.getloadavg()[0]:.2f}"
        )
    finally:
        await pool.close()
        await engine.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--edges", type=int, default=500_000)
    p.add_argument("--due", type=int, default=0, help="children whose edges are due")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    name = args.db or "bench_edge_prune"
    url = fresh_database(args.admin_url, name)
    try:

        async def migrate() -> None:
            client = awa.AsyncClient(url)
            await client.migrate()
            await client.close()

        asyncio.run(migrate())
        write_edges(url, edges=args.edges, due=args.due)
        with maybe_profile(args.profile):
            asyncio.run(run(url, runs=args.runs))
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
