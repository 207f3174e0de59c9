"""Installing queue storage again over an installed schema (what `awa migrate` and
``install_queue_storage()`` do at every deploy) takes no lock that live workers' writes
hold: each step reads the catalog first and changes only what is missing. A step that
ran its DDL anyway (``ADD COLUMN IF NOT EXISTS``, ``CREATE INDEX IF NOT EXISTS``) took
its table's ACCESS EXCLUSIVE or SHARE lock, queued behind every open claim and
completion, stalled the fleet's claims behind it and could deadlock with them."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.postgres


def _tables(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        (schema,),
    ).fetchall()
    return [str(row[0]) for row in rows]


def test_installing_again_waits_for_no_lock_that_workers_hold(migrated_database_url: str) -> None:
    with (
        psycopg.connect(migrated_database_url) as workers,
        psycopg.connect(migrated_database_url, autocommit=True) as installer,
    ):
        tables = _tables(workers, "awa")
        assert "claim_heads" in tables and "done_entries" in tables
        # What open claims, completions and inserts hold until they commit.
        for table in tables:
            workers.execute(f'LOCK TABLE awa."{table}" IN ROW EXCLUSIVE MODE')
        installer.execute("SET lock_timeout = '2s'")
        installer.execute("SELECT awa.install_queue_storage('awa')")
        workers.rollback()
