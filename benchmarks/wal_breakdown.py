"""WAL written per job by a drain, broken down by relation and record type.

Pre-enqueues ``--jobs`` no-op jobs, runs ``CHECKPOINT`` (so the drain pays the full-page
images a real drain after a checkpoint pays, as the shared harness does), drains them with
one ``AsyncClient`` worker (``--slots`` workers, ``claim_batch_size`` ``--claim-batch-size``)
and reads the WAL of the window with ``pg_walinspect``: records whose first block belongs to
a relation of the scratch database, grouped by relation (partitions and their indexes
folded to the parent) and by resource manager / record type, plus the commit records of
the transactions that wrote them. Full-page-image bytes are reported separately (they are
part of the record bytes).

    .venv/bin/python -m benchmarks.wal_breakdown --jobs 10000
    .venv/bin/python -m benchmarks.wal_breakdown --jobs 10000 --by type
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks._common import drop_database, fresh_database, parser
from benchmarks.drain import drain, enqueue_backlog

_REL = re.compile(r"rel (\d+)/(\d+)/(\d+)")


@dataclass
class Row:
    relation: str
    kind: str
    records: int = 0
    bytes: int = 0
    fpi_bytes: int = 0


def _relation_names(url: str) -> dict[int, str]:
    """relfilenode -> relation name, partitions (and partition indexes) folded to the
    top-most parent, prefixed by schema unless it is ``awa``."""
    q = """
    WITH RECURSIVE up(child, top) AS (
        SELECT c.oid, c.oid FROM pg_class c
        UNION ALL
        SELECT up.child, i.inhparent FROM up JOIN pg_inherits i ON i.inhrelid = up.top
    ), tops AS (
        SELECT child, top FROM up u
        WHERE NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = u.top)
    )
    SELECT pg_relation_filenode(c.oid), n.nspname, t.relname
    FROM pg_class c
    JOIN tops ON tops.child = c.oid
    JOIN pg_class t ON t.oid = tops.top
    JOIN pg_namespace n ON n.oid = t.relnamespace
    WHERE pg_relation_filenode(c.oid) IS NOT NULL
    """
    out: dict[int, str] = {}
    with psycopg.connect(url) as conn:
        for node, nsp, name in conn.execute(q):
            if nsp in ("pg_catalog", "pg_toast", "information_schema"):
                out[int(node)] = f"(catalog) {nsp}"
            else:
                out[int(node)] = name if nsp == "awa" else f"{nsp}.{name}"
    return out


def _breakdown(url: str, start: str, end: str) -> list[tuple[str, ...]]:
    q = """
    SELECT xid::text::bigint, resource_manager, record_type, record_length, fpi_length,
           coalesce(block_ref, '')
    FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
    """
    with psycopg.connect(url) as conn:
        return [tuple(str(v) for v in r) for r in conn.execute(q, (start, end))]


def _one(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> str:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return str(row[0])


def measure(admin_url: str, name: str, jobs: int, slots: int, batch: int) -> list[Row]:
    url = fresh_database(admin_url, name)
    asyncio.run(enqueue_backlog(url, jobs))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        db_oid = int(_one(admin, "SELECT oid FROM pg_database WHERE datname = %s", (name,)))
        hold = psycopg.connect(admin_url, autocommit=True)
        hold.execute(
            "SELECT pg_create_physical_replication_slot(%s, true, true)",
            (f"awa_wal_breakdown_{os.getpid()}",),
        )
        admin.execute("CHECKPOINT")
        start = _one(admin, "SELECT pg_current_wal_lsn()::text")
        asyncio.run(drain(url, jobs, slots, batch))
        end = _one(admin, "SELECT pg_current_wal_lsn()::text")
    names = _relation_names(url)
    records = _breakdown(url, start, end)
    hold.close()

    mine_xids: set[str] = set()
    parsed: list[tuple[str, str, str, int, int, re.Match[str] | None, bool]] = []
    for xid, rm, rtype, length_text, fpi_text, refs in records:
        m = _REL.search(refs)
        own = m is not None and int(m.group(2)) == db_oid
        if own and xid != "0":
            mine_xids.add(xid)
        parsed.append((xid, rm, rtype, int(length_text), int(fpi_text), m, own))
    rows: dict[tuple[str, str], Row] = {}
    for xid, rm, rtype, length, fpi, m, own in parsed:
        if own:
            assert m is not None
            rel = names.get(int(m.group(3)), f"filenode {m.group(3)}")
        elif xid in mine_xids and m is None:
            rel = "(commit / xact)"
        else:
            continue
        kind = f"{rm}/{rtype.split()[0]}"
        row = rows.setdefault((rel, kind), Row(rel, kind))
        row.records += 1
        row.bytes += length
        row.fpi_bytes += fpi
    return list(rows.values())


def _print(rows: list[Row], jobs: int, by: str) -> None:
    total = sum(r.bytes for r in rows)
    fpi = sum(r.fpi_bytes for r in rows)
    print(
        f"WAL: {total} bytes = {total / jobs:.1f} B/job "
        f"(FPI {fpi / jobs:.1f} B/job, records {sum(r.records for r in rows) / jobs:.2f}/job)"
    )
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        key = {"relation": r.relation, "type": r.kind, "both": f"{r.relation}  {r.kind}"}[by]
        g = groups[key]
        g[0] += r.records
        g[1] += r.bytes
        g[2] += r.fpi_bytes
    print(f"{'group':<58} {'rec/job':>8} {'B/job':>8} {'FPI B/job':>10}")
    for key, (n, b, f) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{key:<58} {n / jobs:>8.3f} {b / jobs:>8.1f} {f / jobs:>10.1f}")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--claim-batch-size", type=int, default=512)
    p.add_argument("--by", choices=("relation", "type", "both", "all"), default="all")
    a = p.parse_args()
    name = a.db or "awa_bench_wal"
    try:
        rows = measure(a.admin_url, name, a.jobs, a.slots, a.claim_batch_size)
    finally:
        drop_database(a.admin_url, name)
    for by in ("relation", "type", "both") if a.by == "all" else (a.by,):
        print()
        _print(rows, a.jobs, by)


if __name__ == "__main__":
    main()
