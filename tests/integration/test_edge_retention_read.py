"""The dependency retention reads only the edges that can be due (ADR 0032,
"Retention"): its page walks ``job_dependencies_resolved_idx`` up to the cutoff, so the
edges still waiting or resolved within the retention are never read, however many."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters._pg.sql import load_queries
from awa.domain.dependencies import EDGE_RETENTION

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CUTOFF = NOW - EDGE_RETENTION
#: Children with edges that must not be read: waiting, or resolved within the retention.
RECENT = 2000
#: Children whose two edges were resolved past the cutoff.
DUE = 3


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of awa.job_dependencies touched (returned or filtered out),
    every loop counted."""
    own = 0
    if plan.get("Relation Name") == "job_dependencies":
        touched = (
            int(plan["Actual Rows"])
            + int(plan.get("Rows Removed by Filter", 0))
            + int(plan.get("Rows Removed by Index Recheck", 0))
        )
        own = touched * int(plan["Actual Loops"])
    return own + sum(_rows_read(p) for p in plan.get("Plans", []))


def _page(url: str, limit: int) -> tuple[int, list[tuple[int, bool]]]:
    query = load_queries("awa.adapters._pg", "relations.sql")["due_edge_children"]
    params = {
        "before": CUTOFF,
        "after_at": datetime.min.replace(tzinfo=UTC),
        "after_id": 0,
        "limit": limit,
    }
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(query.encode(), params).fetchall()
        (plan,) = conn.execute(
            b"EXPLAIN (ANALYZE, FORMAT JSON) " + query.encode(), params
        ).fetchone() or (None,)
    found = plan if isinstance(plan, list) else json.loads(plan)
    return _rows_read(found[0]["Plan"]), [(int(r[3]), bool(r[4])) for r in rows]


def test_the_page_reads_no_edge_resolved_after_the_cutoff(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO awa.job_dependencies (child_id, parent_id, satisfied_at, on_failure)
            SELECT 1000 + c, 100000 + c * 2 + p,
                   CASE WHEN c %% 2 = 0 THEN %(recent)s END, 'cancel'
            FROM generate_series(0, %(n)s - 1) AS c, generate_series(0, 1) AS p
            """,
            {"recent": NOW - timedelta(hours=1), "n": RECENT},
        )
        conn.execute("ANALYZE awa.job_dependencies")
    # Nothing due: the page touches no edge at all.
    read, rows = _page(migrated_database_url, limit=200)
    assert (read, rows) == (0, [])

    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO awa.job_dependencies (child_id, parent_id, satisfied_at, failed_at)
            SELECT 1 + c, 200000 + c * 2 + p,
                   CASE WHEN p = 0 THEN %(old)s END, CASE WHEN p = 1 THEN %(old)s END
            FROM generate_series(0, %(n)s - 1) AS c, generate_series(0, 1) AS p
            """,
            {"old": CUTOFF - timedelta(seconds=1), "n": DUE},
        )
        # One child with an old edge and a recent one: read, and not a candidate.
        conn.execute(
            """
            INSERT INTO awa.job_dependencies (child_id, parent_id, satisfied_at)
            VALUES (500, 300000, %(old)s), (500, 300001, %(recent)s)
            """,
            {"old": CUTOFF - timedelta(seconds=1), "recent": NOW - timedelta(hours=1)},
        )
    read, rows = _page(migrated_database_url, limit=200)
    assert rows == [(1, True), (2, True), (3, True), (500, False)]
    # The page's old edges, then each of their children's edges once to check them.
    assert read <= (2 * DUE + 1) + 2 * (DUE + 1)
