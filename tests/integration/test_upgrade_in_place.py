"""An existing database upgrades in place: one left by the last release before schema files
(the stream up to 0432, used by the engines of that release) is migrated with the schema
files, keeps every job and queue counter, ends with the schema a fresh database gets, and
the engines work on it afterwards."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.migrations import migrate
from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.integration.test_migrations import render_catalog
from tests.support.schema_history import migrate_as_before

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "upgrade"

_JOBS = "SELECT id, kind, queue, state::text, attempt, run_lease, run_at FROM awa.jobs ORDER BY id"
_COUNTS = "SELECT queue, state::text, sum(n) FROM awa.queue_counts GROUP BY 1, 2 ORDER BY 1, 2"
_VIEWS = (
    "SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c "
    "WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'v' ORDER BY 1"
)
_STAND_INS_MATCH = (
    "SELECT c.relname FROM pg_class c "
    "WHERE c.relnamespace = 'awa'::regnamespace AND c.relispartition AND c.relkind = 'r' "
    "  AND awa.queue_storage_relation_shape(c.oid) IS DISTINCT FROM "
    "      awa.queue_storage_relation_shape("
    "        to_regclass('awa.' || quote_ident(c.relname || '_spare')))"
)


async def _no_children(*_: object) -> tuple[()]:
    return ()


_NO_EDGES = """
CREATE FUNCTION awa.satisfy_dependencies(
    p_completed bigint[], p_now timestamptz, p_release boolean
) RETURNS TABLE (child_id bigint, outcome text) LANGUAGE sql
AS $$ SELECT NULL::bigint, NULL::text WHERE false $$
"""


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(query.encode()).fetchall())


def _as_that_release_ran(url: str) -> None:
    """What running that release's engines left besides the stream: the install run again
    by every queue-storage engine that opened (it put an older job_facts back), stand-ins
    prune built at run time, one of them with an index the ring has since dropped."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage()")
        conn.execute(
            "CREATE TABLE awa.ready_entries_3_spare (LIKE awa.ready_entries INCLUDING ALL)"
        )
        conn.execute("CREATE TABLE awa.claims_3_spare (LIKE awa.claims INCLUDING ALL)")
        conn.execute("CREATE INDEX ON awa.claims_3_spare (attempted_at)")


async def _jobs_in_every_state(url: str) -> dict[str, int]:
    """Queue-storage jobs (schema awa) in every state an attempt reaches, and canonical
    rows, written by the engines on the older schema. Returns job ids by role."""
    with psycopg.connect(url, autocommit=True) as conn:
        canonical = [
            conn.execute(
                "SELECT id FROM awa.insert_job_compat('legacy', 'canonical_q', p_run_at => %s)",
                (run_at,),
            ).fetchone()
            for run_at in (None, "2999-01-01T00:00:00Z")
        ]
    pool = await open_pool(url, max_connections=2)
    engine = QueueStorageEngine(pool, url, clock=SystemClock(), backoff=Backoff(), schema="awa")
    try:
        specs = [JobSpec(kind=f"k{i}", queue=QUEUE, max_attempts=3) for i in range(7)]
        jobs = await engine.enqueue_many(specs)
        (scheduled,) = await engine.enqueue_many(
            [JobSpec(kind="later", queue=QUEUE, run_at=SystemClock().now() + timedelta(hours=2))]
        )
        claims = {c.job.id: c for c in await engine.claim(QUEUE, limit=5)}
        leases = [claims[job.id].lease for job in jobs[:5]]
        assert await engine.complete([leases[0]]) == [Ack.APPLIED]
        assert await engine.fail(leases[1], error="boom") == Ack.APPLIED
        assert await engine.retry(leases[2], error="again", delay=timedelta(hours=1)) == Ack.APPLIED
        assert (
            await engine.register_callback(
                leases[3], callback_id="cb-upgrade", timeout=timedelta(hours=1)
            )
            == Ack.APPLIED
        )
        assert await engine.wait_for_callback(leases[3]) == Ack.APPLIED
        assert await engine.cancel_job(jobs[5].id) is not None
        assert await engine.heartbeat([leases[4]]) == [Ack.APPLIED]  # a lease row
    finally:
        await engine.close()
        await pool.close()
    return {
        "canonical_available": int(canonical[0][0]),  # type: ignore[index]
        "running": jobs[4].id,
        "waiting": jobs[3].id,
        "available": jobs[6].id,
        "scheduled": scheduled.id,
    }


async def test_an_older_database_upgrades_in_place(
    database_url: str, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate_as_before(database_url)
    _as_that_release_ran(database_url)
    # Today's engines write the older release's jobs; that release had no job
    # dependencies (migration 0493), so nothing looks for children to release.
    # The receipt completion names awa.satisfy_dependencies in its own statement, so a
    # stand-in that finds no edges takes its place while the older schema is written, and
    # is dropped before the upgrade installs the real one.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_NO_EDGES)
    with monkeypatch.context() as older:
        older.setattr(pg_dependencies, "finished", _no_children)
        ids = await _jobs_in_every_state(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION awa.satisfy_dependencies(bigint[], timestamptz, boolean)")
    jobs, counts = _rows(database_url, _JOBS), _rows(database_url, _COUNTS)
    states = {str(row[3]) for row in jobs}
    assert states == {s.sql_name for s in JobState}

    await migrate(database_url)

    # Every job and counter is kept; the schema is the one a fresh database gets.
    assert _rows(database_url, _JOBS) == jobs
    assert _rows(database_url, _COUNTS) == counts
    assert render_catalog(database_url) == render_catalog(migrated_database_url)
    assert _rows(database_url, _VIEWS) == _rows(migrated_database_url, _VIEWS)
    assert _rows(database_url, _STAND_INS_MATCH) == []

    # The engines work on it: the attempts under way finish, new work is claimed.
    engine = await QueueStorageEngine.open(database_url, schema="awa")
    try:
        running = await engine.get_job(ids["running"])
        assert running is not None and running.state == JobState.Running
        (claim,) = await engine.claim(QUEUE, limit=5)
        assert claim.job.id == ids["available"]
        assert await engine.complete([claim.lease]) == [Ack.APPLIED]
        waiting = await engine.resolve_callback("cb-upgrade", action="complete")
        assert waiting.state == JobState.Completed
        (new,) = await engine.enqueue_many([JobSpec(kind="after", queue=QUEUE)])
        (again,) = await engine.claim(QUEUE, limit=5)
        assert again.job.id == new.id
        assert await engine.complete([again.lease]) == [Ack.APPLIED]
        assert await engine.rotate_queue_ring() == "rotated"
    finally:
        await engine.close()
    with psycopg.connect(database_url, autocommit=True) as conn:
        # An operator edit through awa.jobs (the view and its triggers were re-created).
        conn.execute("UPDATE awa.jobs SET priority = 1 WHERE id = %s", (ids["scheduled"],))
        row = conn.execute(
            "SELECT state::text, priority FROM awa.jobs WHERE id = %s", (ids["scheduled"],)
        )
        assert row.fetchone() == ("scheduled", 1)
    canonical = await CanonicalEngine.open(database_url)
    try:
        (legacy,) = await canonical.claim("canonical_q", limit=5)
        assert legacy.job.id == ids["canonical_available"]
        assert await canonical.complete([legacy.lease]) == [Ack.APPLIED]
    finally:
        await canonical.close()
