"""The public SQL surface (SQL_SURFACE.md) as seen from plain SQL sessions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from awa.adapters._pg.errors import map_error
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.channels import cancel_notification
from awa.domain.errors import UniqueConflict, ValidationError
from awa.domain.job import JobSpec
from awa.domain.states import JobState

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(migrated_database_url: str) -> str:
    return migrated_database_url


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection[dict[str, object]]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as connection:
        connection.execute("SET timezone = 'UTC'")
        yield connection


Conn = psycopg.Connection[dict[str, object]]


def _count(conn: Conn, table: str = "awa.jobs") -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM {table}".encode()).fetchone()
    assert row is not None
    return int(str(row["n"]))


def test_job_state_enum_labels_in_order(conn: Conn) -> None:
    row = conn.execute("SELECT enum_range(NULL::awa.job_state)::text[] AS labels").fetchone()
    assert row is not None
    assert row["labels"] == [state.sql_name for state in JobState]
    assert row["labels"] == [
        "scheduled",
        "available",
        "running",
        "completed",
        "retryable",
        "failed",
        "cancelled",
        "waiting_external",
    ]


def test_insert_job_compat_defaults(conn: Conn) -> None:
    job = conn.execute("SELECT * FROM awa.insert_job_compat('send_email')").fetchone()
    assert job is not None
    assert job["kind"] == "send_email" and job["queue"] == "default"
    assert job["args"] == {} and job["metadata"] == {} and job["tags"] == []
    assert job["state"] == "available" and job["priority"] == 2
    assert job["attempt"] == 0 and job["max_attempts"] == 25 and job["run_lease"] == 0
    assert job["unique_key"] is None and job["unique_states"] == "11111000"
    assert job["errors"] == [] and job["progress"] is None and job["finalized_at"] is None
    assert job["run_at"] == job["created_at"]


def test_insert_job_compat_every_parameter(conn: Conn) -> None:
    future = datetime.now(UTC) + timedelta(hours=1)
    job = conn.execute(
        """SELECT * FROM awa.insert_job_compat(
               p_kind => 'report', p_queue => 'reports', p_args => '{"n": 1}',
               p_state => 'available', p_priority => 4::smallint,
               p_max_attempts => 3::smallint, p_run_at => %s,
               p_metadata => '{"awa:traceparent": "00-abc-def-01"}',
               p_tags => ARRAY['a', 'b'], p_unique_key => '\\x0102'::bytea,
               p_unique_states => B'11100000', p_ordering_key => '\\x09'::bytea)""",
        (future,),
    ).fetchone()
    assert job is not None
    assert (job["kind"], job["queue"], job["args"]) == ("report", "reports", {"n": 1})
    assert (job["priority"], job["max_attempts"]) == (4, 3)
    assert job["state"] == "scheduled" and job["run_at"] == future
    assert job["metadata"] == {"awa:traceparent": "00-abc-def-01"}
    assert job["tags"] == ["a", "b"]
    assert job["unique_key"] == b"\x01\x02" and job["unique_states"] == "11100000"
    claim = conn.execute("SELECT job_id FROM awa.job_unique_claims").fetchone()
    assert claim is not None and claim["job_id"] == job["id"]

    scheduled = conn.execute(
        "SELECT * FROM awa.insert_job_compat('later', p_state => 'scheduled')"
    ).fetchone()
    assert scheduled is not None and scheduled["state"] == "scheduled"
    past = datetime.now(UTC) - timedelta(hours=1)
    overdue = conn.execute(
        "SELECT * FROM awa.insert_job_compat('overdue', p_run_at => %s)", (past,)
    ).fetchone()
    assert overdue is not None and overdue["state"] == "available" and overdue["run_at"] == past


def test_insert_job_compat_unique_conflict_is_a_unique_violation(conn: Conn) -> None:
    conn.execute("SELECT awa.insert_job_compat('once', p_unique_key => '\\x01'::bytea)")
    with pytest.raises(pg_errors.UniqueViolation) as clash:
        conn.execute("SELECT awa.insert_job_compat('once', p_unique_key => '\\x01'::bytea)")
    assert clash.value.diag.constraint_name == "job_unique_claims_pkey"
    assert isinstance(map_error(clash.value), UniqueConflict)
    assert _count(conn) == 1


def test_insert_job_compat_inside_a_rolled_back_transaction_leaves_nothing(conn: Conn) -> None:
    conn.execute("BEGIN")
    conn.execute("SELECT awa.insert_job_compat('temp', p_unique_key => '\\x07'::bytea)")
    assert _count(conn) == 1
    conn.execute("ROLLBACK")
    assert _count(conn) == 0
    assert _count(conn, "awa.job_unique_claims") == 0


def _channels(listener: psycopg.Connection[object], timeout: float) -> list[str]:
    return [notify.channel for notify in listener.notifies(timeout=timeout)]


def test_sql_functions_send_the_cancel_payload_the_engines_send(conn: Conn) -> None:
    # jobs_view_update and queue_storage_edit build it with json_build_object
    row = conn.execute(
        "SELECT json_build_object('job_id', 42::bigint, 'run_lease', 7::bigint)::text AS p"
    ).fetchone()
    assert row is not None and row["p"] == cancel_notification(42, 7)[1]


def test_listen_receives_ready_work_only_on_commit(url: str, conn: Conn) -> None:
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute('LISTEN "awa:email"')
        conn.execute("BEGIN")
        conn.execute("SELECT awa.insert_job_compat('send', p_queue => 'email')")
        assert _channels(listener, 0.3) == []
        conn.execute("COMMIT")
        assert _channels(listener, 2.0) == ["awa:email"]

        later = datetime.now(UTC) + timedelta(hours=1)
        conn.execute(
            "SELECT awa.insert_job_compat('send', p_queue => 'email', p_run_at => %s)", (later,)
        )
        assert _channels(listener, 0.3) == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ("awa.insert_job_compat('k', p_priority => 9::smallint)", "priority"),
        ("awa.insert_job_compat('k', p_max_attempts => 0::smallint)", "max_attempts"),
        (
            "awa.insert_job_compat('k', p_tags => "
            "ARRAY(SELECT 't' || g FROM generate_series(1, 21) g))",
            "tags",
        ),
        ("awa.insert_job_compat('k', p_queue => repeat('q', 300))", "queue"),
        ("awa.insert_job_compat(repeat('k', 201))", "kind"),
    ],
)
def test_database_refuses_bad_values(conn: Conn, call: str, field: str) -> None:
    with pytest.raises(pg_errors.CheckViolation) as refused:
        conn.execute(f"SELECT {call}".encode())
    error = map_error(refused.value)
    assert isinstance(error, ValidationError) and error.field == field
    with pytest.raises(pg_errors.CheckViolation):
        conn.execute(f"INSERT INTO awa.jobs (kind, priority) VALUES ('k', {9})".encode())
    assert _count(conn) == 0


def test_insert_update_delete_through_the_jobs_view(conn: Conn) -> None:
    inserted = conn.execute(
        "INSERT INTO awa.jobs (kind, queue, args) VALUES ('direct', 'ops', '{\"x\": 1}') "
        "RETURNING id, state, priority, max_attempts, run_lease"
    ).fetchone()
    assert inserted is not None
    assert (inserted["state"], inserted["priority"], inserted["max_attempts"]) == (
        "available",
        2,
        25,
    )
    job_id = inserted["id"]

    changed = conn.execute(
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now(), priority = 1 "
        "WHERE id = %s RETURNING state, priority, finalized_at",
        (job_id,),
    ).fetchone()
    assert changed is not None and changed["state"] == "failed" and changed["priority"] == 1
    later = datetime.now(UTC) + timedelta(days=1)
    conn.execute(
        "UPDATE awa.jobs SET state = 'scheduled', run_at = %s, finalized_at = NULL WHERE id = %s",
        (later, job_id),
    )
    row = conn.execute("SELECT state, run_at FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"state": "scheduled", "run_at": later}

    deleted = conn.execute("DELETE FROM awa.jobs WHERE id = %s", (job_id,))
    assert deleted.rowcount == 1
    assert _count(conn) == 0


def test_queue_meta_enqueue_shards_upsert_and_range(conn: Conn) -> None:
    upsert = (
        "INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES ('orders', %s) "
        "ON CONFLICT (queue) DO UPDATE SET enqueue_shards = EXCLUDED.enqueue_shards"
    )
    conn.execute(upsert, (4,))
    conn.execute(upsert, (16,))
    row = conn.execute(
        "SELECT enqueue_shards, paused, dlq_enabled FROM awa.queue_meta WHERE queue = 'orders'"
    ).fetchone()
    assert row == {"enqueue_shards": 16, "paused": False, "dlq_enabled": False}
    default = conn.execute(
        "INSERT INTO awa.queue_meta (queue) VALUES ('plain') RETURNING enqueue_shards"
    ).fetchone()
    assert default == {"enqueue_shards": 1}
    for bad in (0, 65):
        with pytest.raises(pg_errors.CheckViolation) as refused:
            conn.execute(upsert, (bad,))
        error = map_error(refused.value)
        assert isinstance(error, ValidationError) and error.field == "enqueue_shards"


@pytest.mark.anyio
async def test_sql_deadline_repair_is_picked_up_by_the_rescue(url: str, conn: Conn) -> None:
    engine = await CanonicalEngine.open(url)
    try:
        (job,) = await engine.enqueue_many([JobSpec(kind="slow")])
        (claim,) = await engine.claim("default", limit=1, deadline=timedelta(hours=1))
        assert await engine.rescue_expired_deadlines() == []
        conn.execute(
            "UPDATE awa.jobs SET deadline_at = now() - interval '1 second' WHERE id = %s",
            (job.id,),
        )
        (rescued,) = await engine.rescue_expired_deadlines()
        assert rescued.lease == claim.lease and rescued.reason == "deadline exceeded"
        assert rescued.new_state == JobState.Retryable
        after = await engine.get_job(job.id)
        assert after is not None and after.errors[-1]["error"] == "deadline exceeded"
    finally:
        await engine.close()


def test_install_queue_storage_keeps_the_default_schema_sizes(conn: Conn) -> None:
    with pytest.raises(pg_errors.InvalidParameterValue, match="16 queue slots"):
        conn.execute("SELECT awa.install_queue_storage('awa', 4)")
    with pytest.raises(pg_errors.InvalidParameterValue):
        conn.execute("SELECT awa.install_queue_storage('awa', 16, 2)")
    conn.execute("SELECT awa.install_queue_storage('awa')")
    conn.execute("SELECT awa.install_queue_storage('qs_small', 4, 2)")
    slots = conn.execute("SELECT slot_count FROM qs_small.ring_state").fetchone()
    assert slots is not None and slots["slot_count"] == 4


def test_control_tables_prune_their_dead_versions_early(conn: Conn) -> None:
    conn.execute("SELECT awa.install_queue_storage('qs_ff')")
    rows = conn.execute(
        "SELECT n.nspname AS schema, c.relname AS name, c.reloptions AS options "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname IN ('awa', 'qs_ff') AND c.relname IN "
        "('lanes', 'claim_heads', 'queue_counts', 'completions', 'ring_state')"
    ).fetchall()
    assert len(rows) == 10
    options = [list(row["options"] or []) for row in rows]  # type: ignore[call-overload]
    assert all("fillfactor=10" in found for found in options), rows
