"""What the SQL producer pays for unique conflict modes (ADR 0034), on queue storage.

Interleaved inserts on one autocommit connection, each statement its own transaction:

- ``append``: ``awa.insert_job_append(...)``, the producer's write as it was before the
  modes (the body ``awa.insert_job_compat`` had);
- ``compat``: ``awa.insert_job_compat(...)`` without a unique key, the path every single
  client insert and bridge insert takes (one more PL/pgSQL call in front of the write);
- ``debounce new``: ``insert_job_compat`` with a debounce mode and a fresh key each time
  (merge probe finds no holder, then the write in a subtransaction);
- ``debounce merge``: the same key each time (the waiting job is re-written).

Prints each variant's median and p90 per insert and the ratios against ``append`` in
the same run.

    .venv/bin/python -m benchmarks.unique_conflict_insert --rounds 10 --per-round 300
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import psycopg

from benchmarks._common import drop_database, fresh_database, parser, percentile
from benchmarks.enqueue_bulk import activate

QUEUE = "bench"
DEBOUNCE = json.dumps(
    {"awa:unique_conflict": {"on_conflict": "debounce", "window": 60, "max_wait": 3600}}
)
VARIANTS = {
    "append": "SELECT id FROM awa.insert_job_append('bench_append', %s)",
    "compat": "SELECT id FROM awa.insert_job_compat('bench_compat', %s)",
    "debounce new": (
        "SELECT id FROM awa.insert_job_compat('bench_new', %s, p_metadata => %s::jsonb, "
        "p_unique_key => %s::bytea)"
    ),
    "debounce merge": (
        "SELECT id FROM awa.insert_job_compat('bench_merge', %s, p_metadata => %s::jsonb, "
        "p_unique_key => '\\x6d65726765'::bytea)"
    ),
}


def _params(name: str, n: int) -> tuple[object, ...]:
    if name == "debounce new":
        return (QUEUE, DEBOUNCE, n.to_bytes(8, "big"))
    if name == "debounce merge":
        return (QUEUE, DEBOUNCE)
    return (QUEUE,)


def run(url: str, rounds: int, per_round: int) -> None:
    asyncio.run(activate(url))
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    counter = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for name, sql in VARIANTS.items():  # warm-up: plans and caches
            for _ in range(20):
                counter += 1
                conn.execute(sql, _params(name, counter))
        names = list(VARIANTS)
        for step in range(rounds * per_round):
            # One insert of each variant per step, in a rotating order, so a burst of
            # load on the shared host falls on all of them alike.
            shift = step % len(names)
            for name in names[shift:] + names[:shift]:
                counter += 1
                sql = VARIANTS[name]
                started = time.perf_counter()
                conn.execute(sql, _params(name, counter))
                times[name].append(time.perf_counter() - started)
    base = statistics.median(times["append"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:15s} median {median * 1e6:7.0f} us  p90 {percentile(values, 0.9) * 1e6:7.0f} us"
            f"  x{median / base:.2f} of append  (n={len(values)})"
        )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--per-round", type=int, default=300)
    a = p.parse_args()
    name = a.db or "awa_bench_unique_conflict"
    url = fresh_database(a.admin_url, name)
    try:
        run(url, a.rounds, a.per_round)
    finally:
        drop_database(a.admin_url, name)


if __name__ == "__main__":
    main()
