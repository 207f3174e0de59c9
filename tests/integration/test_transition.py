"""The staged storage transition: SQL functions, every gate refusal, routing of producers,
the move of the canonical backlog, the routing engine and the ``awa storage`` commands."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from awa.domain.transition import TransitionState
from awa.entrypoints.cli import cli
from awa.entrypoints.routing import open_postgres_routing
from awa.ports.maintenance import RingMaintenance
from awa.ports.storage import Ack, JobFilter

pytestmark = pytest.mark.postgres

Conn = psycopg.Connection[dict[str, object]]


@pytest.fixture
def conn(migrated_database_url: str) -> Iterator[Conn]:
    with psycopg.connect(migrated_database_url, autocommit=True, row_factory=dict_row) as c:
        yield c


def invoke(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def refused_gate(conn: Conn, sql: str, params: tuple[object, ...] = ()) -> str:
    """Run ``sql`` expecting a refusal; returns the gate named in the error's hint."""
    with pytest.raises(pg_errors.ObjectNotInPrerequisiteState) as info:
        conn.execute(sql.encode(), params)
    hint = info.value.diag.message_hint or ""
    primary = info.value.diag.message_primary or ""
    assert primary.startswith(f"storage transition refused by gate {hint}: ")
    return hint


def state(conn: Conn) -> str:
    row = conn.execute("SELECT state FROM awa.storage_status()").fetchone()
    assert row is not None
    return str(row["state"])


def add_runtime(
    conn: Conn,
    capability: str,
    *,
    seen_ago: timedelta = timedelta(0),
    shutting_down: bool = False,
    role: str = "auto",
) -> str:
    runtime_id = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO awa.runtime_instances (id, version, storage_capability, transition_role, "
        "shutting_down, last_seen_at) VALUES (%s, 'test', %s, %s, %s, now() - %s)",
        (runtime_id, capability, role, shutting_down, seen_ago),
    )
    return runtime_id


def insert_sql(conn: Conn, kind: str = "k", **named: object) -> dict[str, object]:
    args = ", ".join(f"{name} => %({name})s" for name in named)
    sql = f"SELECT * FROM awa.insert_job_compat(%(kind)s{', ' + args if args else ''})"
    row = conn.execute(sql.encode(), {"kind": kind, **named}).fetchone()
    assert row is not None
    return dict(row)


def to_mixed(conn: Conn) -> None:
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    add_runtime(conn, "queue_storage")
    conn.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
    assert state(conn) == "mixed_transition"


def in_queue_storage(conn: Conn, job_id: object) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM awa.ready_entries WHERE job_id = %(id)s) "
        "OR EXISTS (SELECT 1 FROM awa.deferred_jobs WHERE job_id = %(id)s) AS found",
        {"id": job_id},
    ).fetchone()
    assert row is not None
    return bool(row["found"])


def in_canonical(conn: Conn, job_id: object) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM awa.canonical_jobs WHERE id = %s) AS found", (job_id,)
    ).fetchone()
    assert row is not None
    return bool(row["found"])


# ---------------------------------------------------------------------- status


def test_storage_status_json_reports_state_backlog_and_runtimes(
    conn: Conn, migrated_database_url: str
) -> None:
    insert_sql(conn)
    add_runtime(conn, "queue_storage")
    result = invoke(migrated_database_url, "storage", "status", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["state"] == "canonical"
    assert report["current_engine"] == "canonical"
    assert report["active_engine"] == "canonical"
    assert report["prepared_engine"] is None
    assert report["transition_epoch"] == 0
    assert report["canonical_live_backlog"] == 1
    assert report["active_queue_storage_schema"] is None
    assert report["runtimes"]["live_queue_storage_capable"] == 1
    assert report["schema_version"] >= 200
    # What each next step waits for, as awa-pg's report lists it: every blocker, not
    # only the first.
    assert report["live_runtime_capability_counts"] == {"queue_storage": 1}
    assert report["prepared_queue_storage_schema"] is None
    assert report["prepared_schema_ready"] is False
    assert report["can_enter_mixed_transition"] is False
    assert report["enter_mixed_transition_blockers"] == [
        "enter-mixed-transition needs state prepared, the cluster is canonical",
        "the prepared engine is not queue_storage",
    ]
    assert report["can_finalize"] is False
    assert report["finalize_blockers"] == [
        "finalize needs state mixed_transition, the cluster is canonical",
        "1 canonical job(s) are not finished yet",
    ]

    to_mixed(conn)
    report = json.loads(invoke(migrated_database_url, "--json", "storage", "status").stdout)
    assert report["state"] == "mixed_transition"
    assert report["active_engine"] == "queue_storage"
    assert report["prepared_engine"] == "queue_storage"
    assert report["active_queue_storage_schema"] == "awa"
    assert report["details"] == {"schema": "awa"}
    assert report["transition_epoch"] == 2
    assert report["can_enter_mixed_transition"] is False
    assert report["finalize_blockers"] == ["1 canonical job(s) are not finished yet"]


# ---------------------------------------------------------------------- gates


def test_prepare_gates(conn: Conn, migrated_database_url: str) -> None:
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_prepare('canonical')")
        == "engine_is_queue_storage"
    )
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_prepare('queue_storage', '[1]')")
        == "details_is_object"
    )
    assert (
        refused_gate(
            conn, """SELECT * FROM awa.storage_prepare('queue_storage', '{"schema": "a b"}')"""
        )
        == "schema_is_identifier"
    )
    assert state(conn) == "canonical"
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    # Preparing again is allowed and keeps the epoch.
    row = conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')").fetchone()
    assert row is not None and row["transition_epoch"] == 1
    to_mixed_runtime = add_runtime(conn, "queue_storage")
    assert to_mixed_runtime
    conn.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_prepare('queue_storage')")
        == "prepare_from_canonical"
    )
    # The CLI: one line naming the gate, exit 1.
    result = invoke(migrated_database_url, "storage", "prepare", "--engine", "queue_storage")
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("awa: error: storage transition refused by gate prepare_from_canonical")
    assert "Traceback" not in result.stderr
    # Bad usage is exit 2.
    assert invoke(migrated_database_url, "storage", "prepare").exit_code == 2
    bad_json = invoke(
        migrated_database_url, "storage", "prepare", "--engine", "queue_storage", "--details", "{"
    )
    assert bad_json.exit_code == 2


def test_enter_mixed_gates(conn: Conn, migrated_database_url: str) -> None:
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "state_is_prepared"
    )
    conn.execute("""SELECT * FROM awa.storage_prepare('queue_storage', '{"schema": "qs_x"}')""")
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "queue_storage_schema_installed"
    )
    built = invoke(
        migrated_database_url,
        "storage",
        "prepare-queue-storage-schema",
        "--schema",
        "qs_x",
        "--queue-slot-count",
        "4",
    )
    assert built.exit_code == 0, built.stderr
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "live_queue_storage_runtime"
    )
    # Stale, shut-down and drain-only runtimes do not make the gate pass.
    add_runtime(conn, "queue_storage", seen_ago=timedelta(minutes=5))
    add_runtime(conn, "queue_storage", shutting_down=True)
    add_runtime(conn, "canonical_drain_only", role="canonical_drain")
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "live_queue_storage_runtime"
    )
    add_runtime(conn, "queue_storage", role="queue_storage_target")
    canonical_only = add_runtime(conn, "canonical")
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "no_live_canonical_only_runtime"
    )
    cli_refusal = invoke(migrated_database_url, "storage", "enter-mixed-transition")
    assert cli_refusal.exit_code == 1
    assert "no_live_canonical_only_runtime" in cli_refusal.stderr.strip().splitlines()[-1]
    # A canonical-only runtime last seen long ago no longer counts as live.
    conn.execute(
        "UPDATE awa.runtime_instances SET last_seen_at = now() - interval '1 hour' WHERE id = %s",
        (canonical_only,),
    )
    done = invoke(migrated_database_url, "storage", "enter-mixed-transition", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "mixed_transition"
    row = conn.execute("SELECT awa.active_queue_storage_schema() AS s").fetchone()
    assert row is not None and row["s"] == "qs_x"
    # Producers now write to the prepared schema.
    job = insert_sql(conn)
    found = conn.execute(
        "SELECT count(*) AS n FROM qs_x.ready_entries WHERE job_id = %s", (job["id"],)
    )
    assert found.fetchone() == {"n": 1}


def test_finalize_gates(conn: Conn, migrated_database_url: str) -> None:
    assert refused_gate(conn, "SELECT * FROM awa.storage_finalize()") == "state_is_mixed_transition"
    canonical_job = insert_sql(conn)
    retrying = insert_sql(conn, p_state="retryable")
    to_mixed(conn)
    assert refused_gate(conn, "SELECT * FROM awa.storage_finalize()") == "canonical_backlog_drained"
    check = invoke(migrated_database_url, "storage", "finalize", "--check")
    assert check.exit_code == 1
    assert "canonical_backlog_drained" in check.stderr.strip().splitlines()[-1]
    waited = invoke(migrated_database_url, "storage", "finalize", "--wait", "300ms")
    assert waited.exit_code == 1
    assert "canonical_backlog_drained" in waited.stderr.strip().splitlines()[-1]
    assert invoke(migrated_database_url, "storage", "finalize", "--wait", "soon").exit_code == 2
    # A running canonical attempt keeps the gate closed; waiting jobs are moved away.
    conn.execute(
        "UPDATE awa.canonical_jobs SET state = 'running', attempt = 1, run_lease = 1 WHERE id = %s",
        (canonical_job["id"],),
    )
    moved = conn.execute("SELECT awa.storage_move_canonical_backlog(100) AS n").fetchone()
    assert moved == {"n": 1}
    assert in_queue_storage(conn, retrying["id"]) and not in_canonical(conn, retrying["id"])
    assert refused_gate(conn, "SELECT * FROM awa.storage_finalize()") == "canonical_backlog_drained"
    conn.execute(
        "UPDATE awa.canonical_jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
        (canonical_job["id"],),
    )
    dry = invoke(migrated_database_url, "storage", "finalize", "--check", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert json.loads(dry.stdout)["check"] is True
    assert state(conn) == "mixed_transition"
    done = invoke(migrated_database_url, "storage", "finalize", "--wait", "5s", "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["state"] == "active"
    assert report["current_engine"] == "queue_storage"
    assert report["finalized_at"] is not None
    assert refused_gate(conn, "SELECT * FROM awa.storage_finalize()") == "state_is_mixed_transition"


def test_enter_mixed_quiesced_needs_the_fleet_stopped(
    conn: Conn, migrated_database_url: str
) -> None:
    """awa-cli 0.6.9's --quiesced: with every worker stopped there is no live
    queue-storage runtime to wait for, and any runtime still heartbeating refuses it."""
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    # The usual flip needs a live queue-storage runtime; the quiesced one needs none.
    assert (
        refused_gate(conn, "SELECT * FROM awa.storage_enter_mixed_transition()")
        == "live_queue_storage_runtime"
    )
    stale = add_runtime(conn, "canonical", seen_ago=timedelta(hours=1))
    live = add_runtime(conn, "queue_storage")
    refused = invoke(migrated_database_url, "storage", "enter-mixed-transition", "--quiesced")
    assert refused.exit_code == 1
    assert "no_live_runtime" in refused.stderr and "1 runtime(s) still heartbeat" in refused.stderr
    assert state(conn) == "prepared"
    conn.execute("DELETE FROM awa.runtime_instances WHERE id = %s", (live,))
    flipped = invoke(
        migrated_database_url, "storage", "enter-mixed-transition", "--quiesced", "--json"
    )
    assert flipped.exit_code == 0, flipped.stderr
    assert json.loads(flipped.stdout)["state"] == "mixed_transition"
    assert stale  # a runtime gone quiet long ago does not count as live


def test_abort_gates(conn: Conn, migrated_database_url: str) -> None:
    # Canonical: nothing to abort, a no-op as in awa-pg (SQL and CLI alike).
    epoch = conn.execute("SELECT transition_epoch FROM awa.storage_status()").fetchone()
    row = conn.execute("SELECT state, transition_epoch FROM awa.storage_abort()").fetchone()
    assert row is not None and epoch is not None
    assert (row["state"], row["transition_epoch"]) == ("canonical", epoch["transition_epoch"])
    noop = invoke(migrated_database_url, "storage", "abort", "--json")
    assert noop.exit_code == 0, noop.stderr
    assert json.loads(noop.stdout)["state"] == "canonical"
    assert json.loads(noop.stdout)["transition_epoch"] == epoch["transition_epoch"]
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    aborted = invoke(migrated_database_url, "storage", "abort", "--json")
    assert aborted.exit_code == 0, aborted.stderr
    assert json.loads(aborted.stdout)["state"] == "canonical"
    # Mixed with an empty queue storage: abort is allowed.
    to_mixed(conn)
    conn.execute("SELECT * FROM awa.storage_abort()")
    assert state(conn) == "canonical"
    # Mixed with a queue-storage job: refused.
    to_mixed(conn)
    job = insert_sql(conn)
    assert in_queue_storage(conn, job["id"])
    assert refused_gate(conn, "SELECT * FROM awa.storage_abort()") == "no_queue_storage_rows"
    cli_refusal = invoke(migrated_database_url, "storage", "abort")
    assert cli_refusal.exit_code == 1
    assert "no_queue_storage_rows" in cli_refusal.stderr.strip().splitlines()[-1]
    conn.execute("SELECT * FROM awa.storage_finalize()")
    assert refused_gate(conn, "SELECT * FROM awa.storage_abort()") == "transition_in_progress"


def test_prepare_schema_refusals(migrated_database_url: str) -> None:
    reset = invoke(
        migrated_database_url,
        "storage",
        "prepare-queue-storage-schema",
        "--schema",
        "awa",
        "--reset",
    )
    assert reset.exit_code == 1
    assert reset.stderr.strip().splitlines()[-1].startswith("awa: error: refusing to reset")
    odd = invoke(
        migrated_database_url,
        "storage",
        "prepare-queue-storage-schema",
        "--schema",
        "awa",
        "--queue-slot-count",
        "4",
    )
    assert odd.exit_code == 1
    bad = invoke(
        migrated_database_url, "storage", "prepare-queue-storage-schema", "--schema", "x-y"
    )
    assert bad.exit_code == 2


def test_fresh_install_goes_straight_to_active(conn: Conn) -> None:
    add_runtime(conn, "queue_storage")
    row = conn.execute("SELECT awa.storage_auto_finalize_if_fresh('awa') AS done").fetchone()
    assert row == {"done": False}, "a live runtime means the cluster is in use"
    conn.execute("DELETE FROM awa.runtime_instances")
    insert_sql(conn)
    row = conn.execute("SELECT awa.storage_auto_finalize_if_fresh('awa') AS done").fetchone()
    assert row == {"done": False}, "a canonical job means the cluster is in use"
    conn.execute("DELETE FROM awa.canonical_jobs")
    row = conn.execute("SELECT awa.storage_auto_finalize_if_fresh('awa') AS done").fetchone()
    assert row == {"done": True}
    assert state(conn) == "active"
    row = conn.execute("SELECT awa.storage_auto_finalize_if_fresh('awa') AS done").fetchone()
    assert row == {"done": False}


# ---------------------------------------------------------------------- routing


def test_insert_job_compat_routes_by_state_and_keeps_unique_keys_global(conn: Conn) -> None:
    before = insert_sql(conn, p_unique_key=b"k1")
    assert in_canonical(conn, before["id"])
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    prepared = insert_sql(conn)
    assert in_canonical(conn, prepared["id"]), "prepared still routes to canonical"
    add_runtime(conn, "queue_storage")
    conn.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
    during = insert_sql(conn, p_unique_key=b"k2", p_ordering_key=b"order-1")
    assert in_queue_storage(conn, during["id"]) and not in_canonical(conn, during["id"])
    assert during["state"] == "available"
    later = insert_sql(conn, p_run_at="2099-01-01T00:00:00Z")
    assert later["state"] == "scheduled" and in_queue_storage(conn, later["id"])
    # Keys held on either engine refuse duplicates on the other.
    with pytest.raises(pg_errors.UniqueViolation):
        insert_sql(conn, p_unique_key=b"k1")
    with pytest.raises(pg_errors.UniqueViolation):
        insert_sql(conn, p_unique_key=b"k2")
    with pytest.raises(pg_errors.CheckViolation):
        insert_sql(conn, p_priority=9)
    ids = [int(str(job["id"])) for job in (before, prepared, during, later)]
    assert ids == sorted(ids), "both engines draw ids from awa.jobs_id_seq"


@pytest.mark.anyio
async def test_routing_engine_enqueues_claims_and_finishes_on_both_engines(
    migrated_database_url: str,
) -> None:
    engine = await open_postgres_routing(migrated_database_url, refresh_interval=0.0)
    try:
        (old,) = await engine.enqueue_many([JobSpec(kind="k", args={"n": 1})])
        (keyed,) = await engine.enqueue_many([JobSpec(kind="k", unique_key=b"same")])
        async with await psycopg.AsyncConnection.connect(
            migrated_database_url, autocommit=True
        ) as admin:
            await admin.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
            await admin.execute(
                "INSERT INTO awa.runtime_instances (id, version, storage_capability) "
                "VALUES (gen_random_uuid(), 't', 'queue_storage')"
            )
            await admin.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
        assert (await engine.status()).state is TransitionState.MIXED_TRANSITION
        (new,) = await engine.enqueue_many([JobSpec(kind="k", args={"n": 2})])
        with pytest.raises(UniqueConflict):
            await engine.enqueue_many([JobSpec(kind="k", unique_key=b"same")])
        skipped = await engine.enqueue_many_skip_duplicates(
            [JobSpec(kind="k", unique_key=b"same"), JobSpec(kind="k", args={"n": 3})]
        )
        assert [job.args for job in skipped] == [{"n": 3}]
        qs = engine.queue_storage()
        assert await qs.get_job(new.id) is not None
        assert await engine.canonical.get_job(new.id) is None
        # Canonical first (the drain), then queue storage.
        claims = await engine.claim("default", limit=10)
        assert [c.job.id for c in claims] == [old.id, keyed.id, new.id, skipped[0].id]
        acks = await engine.complete([c.lease for c in claims])
        assert acks == [Ack.APPLIED] * 4
        for job_id in (old.id, new.id):
            record = await engine.get_job(job_id)
            assert record is not None and record.state is JobState.Completed
        listed = await engine.list_jobs(JobFilter())
        assert [j.id for j in listed] == sorted([old.id, keyed.id, new.id, skipped[0].id])[::-1]
        counts = {c.queue: c for c in await engine.queue_counts()}
        assert counts["default"].count(JobState.Completed) == 4
    finally:
        await engine.close()


def test_finalize_waits_for_a_producer_that_routed_to_canonical(
    conn: Conn, migrated_database_url: str
) -> None:
    conn.execute("SELECT * FROM awa.storage_prepare('queue_storage')")
    add_runtime(conn, "queue_storage")
    with psycopg.connect(migrated_database_url, row_factory=dict_row) as producer:
        # Routed to canonical while prepared; still uncommitted.
        job = insert_sql(producer)
        with psycopg.connect(migrated_database_url, autocommit=True) as operator:
            operator.execute("SET lock_timeout = '300ms'")
            with pytest.raises(pg_errors.LockNotAvailable):
                operator.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
        producer.commit()
    conn.execute("SELECT * FROM awa.storage_enter_mixed_transition()")
    assert refused_gate(conn, "SELECT * FROM awa.storage_finalize()") == "canonical_backlog_drained"
    assert in_canonical(conn, job["id"])
    # In mixed state an uncommitted queue-storage insert holds abort back, then refuses it.
    with psycopg.connect(migrated_database_url, row_factory=dict_row) as producer:
        insert_sql(producer)
        with psycopg.connect(migrated_database_url, autocommit=True) as operator:
            operator.execute("SET lock_timeout = '300ms'")
            with pytest.raises(pg_errors.LockNotAvailable):
                operator.execute("SELECT * FROM awa.storage_abort()")
        producer.commit()
    assert refused_gate(conn, "SELECT * FROM awa.storage_abort()") == "no_queue_storage_rows"


@pytest.mark.anyio
async def test_moved_jobs_keep_their_claim_order_in_queue_storage(
    migrated_database_url: str,
) -> None:
    engine = await open_postgres_routing(migrated_database_url, refresh_interval=0.0)
    try:
        with psycopg.connect(migrated_database_url, autocommit=True, row_factory=dict_row) as c:
            old = insert_sql(c, p_run_at="2020-01-01T00:00:00Z")
            assert old["state"] == "available"
            to_mixed(c)
        (new,) = await engine.enqueue_many([JobSpec(kind="k")])
        assert await engine.move_canonical_backlog(limit=10) == 1
        # The moved job sits behind the newer one in the lane but runs first.
        claims = await engine.queue_storage().claim("default", limit=1)
        assert [claim.job.id for claim in claims] == [old["id"]]
        assert claims[0].job.run_lease == 1 and claims[0].job.attempt == 1
        claims = await engine.queue_storage().claim("default", limit=1)
        assert [claim.job.id for claim in claims] == [new.id]
    finally:
        await engine.close()


@pytest.mark.anyio
async def test_ring_maintenance_follows_the_state(migrated_database_url: str) -> None:
    engine = await open_postgres_routing(migrated_database_url, refresh_interval=0.0)
    try:
        assert isinstance(engine, RingMaintenance)
        assert await engine.rotate() == "skipped_idle"
        assert await engine.prune(failed_retention=timedelta(days=1)) == "idle"
        with psycopg.connect(migrated_database_url, autocommit=True, row_factory=dict_row) as c:
            to_mixed(c)
        await engine.enqueue_many([JobSpec(kind="k")])
        assert await engine.rotate() == "rotated"
    finally:
        await engine.close()


@pytest.mark.anyio
async def test_drain_only_runtime_claims_canonical_and_fresh_runtime_goes_active(
    migrated_database_url: str,
) -> None:
    engine = await open_postgres_routing(migrated_database_url, refresh_interval=0.0)
    try:
        drained = await engine.bind_transition_role("canonical_drain")
        assert drained.state is TransitionState.CANONICAL, "a drain-only runtime never switches"
        assert engine.storage_capability == "canonical_drain_only"
        (old,) = await engine.enqueue_many([JobSpec(kind="k")])
        with psycopg.connect(migrated_database_url, autocommit=True, row_factory=dict_row) as c:
            to_mixed(c)
        (new,) = await engine.enqueue_many([JobSpec(kind="k")])
        claims = await engine.claim("default", limit=10)
        assert [claim.job.id for claim in claims] == [old.id]
        assert new.id not in {claim.job.id for claim in claims}
        assert await engine.complete([claims[0].lease]) == [Ack.APPLIED]
        target = await engine.bind_transition_role("queue_storage_target")
        assert target.state is TransitionState.MIXED_TRANSITION
        assert engine.storage_capability == "queue_storage"
        assert [c.job.id for c in await engine.claim("default", limit=10)] == [new.id]
    finally:
        await engine.close()


@pytest.mark.anyio
async def test_first_runtime_on_a_fresh_install_goes_active(migrated_database_url: str) -> None:
    engine = await open_postgres_routing(migrated_database_url)
    try:
        status = await engine.bind_transition_role("auto")
        assert status.state is TransitionState.ACTIVE
        assert status.details.get("fresh_install") is True
        (job,) = await engine.enqueue_many([JobSpec(kind="k")])
        assert await engine.canonical.get_job(job.id) is None
        assert await engine.queue_storage().get_job(job.id) is not None
    finally:
        await engine.close()
