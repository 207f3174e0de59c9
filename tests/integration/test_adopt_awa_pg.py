"""`awa adopt`: a database awa-pg 0.6.9 migrated and left with a job in every state is
converted in place and drained by this package's worker (ADR 0019).

awa-pg itself makes the database (``tests/differential/adopt_seed.py`` under the scratch
interpreter ``tests/differential/run.py`` builds); the test is skipped only when awa-pg
0.6.9 cannot be installed.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from awa import AsyncClient, UniqueConflict
from awa.entrypoints.cli import cli
from tests.differential import run as differential
from tests.differential.adopt import (
    ENGINES,
    AdoptArgs,
    drain,
    let_runtimes_go_stale,
    seed,
    sql,
    states,
    verdict,
)
from tests.support.pg import DatabaseFactory
from tests.support.roles import owned_database

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture(scope="module")
def awa_pg_python() -> Path:
    try:
        return differential.awa_pg_python()
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"awa-pg 0.6.9 cannot be installed here ({exc}), so no database of it")


@pytest.fixture
def awa_pg_database_url(pg_databases: DatabaseFactory, awa_pg_python: Path) -> Iterator[str]:
    """An empty database awa-pg 0.6.9 migrated (its 40 migrations take seconds, so once
    per session into a template, which ``pg_databases`` starts building in the
    background when the session holds a test that uses this fixture)."""
    template = pg_databases.template(differential.AWA_PG_TEMPLATE, differential.migrate_with_awa_pg)
    url = pg_databases.create(template)
    try:
        yield url
    finally:
        pg_databases.release(url)


async def awa(url: str, *args: str) -> Result:
    """The command line, on a thread of its own (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, ["--database-url", url, *args])


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_awa_pg_database_is_adopted_in_place_and_every_job_runs_to_its_end_once(
    awa_pg_python: Path, awa_pg_database_url: str, engine: str
) -> None:
    database_url = awa_pg_database_url
    seeded = await asyncio.to_thread(seed, awa_pg_python, database_url, engine)
    ids: dict[str, int] = seeded["jobs"]
    awa_pg_state = sql(database_url, "SELECT id, state::text FROM awa.jobs ORDER BY id")

    # `awa migrate` no longer loops back to itself: it names the way out.
    migrated = await awa(database_url, "migrate")
    assert migrated.exit_code == 1
    assert "migrated by awa-pg (schema version 40)" in migrated.output
    assert "`awa adopt`" in migrated.output
    # So does every command that needs this package's schema.
    for command in (["job", "list"], ["health"], ["storage", "status"], ["migrate", "--pending"]):
        answered = await awa(database_url, *command)
        assert answered.exit_code == 1 and "`awa adopt`" in answered.output, command

    # The seeding worker's runtime heartbeat moments ago: refused, naming it.
    (runtime,) = sql(database_url, "SELECT instance_id::text FROM awa.runtime_instances")
    refused = await awa(database_url, "adopt")
    assert refused.exit_code == 1, refused.output
    assert "1 awa-pg runtime(s) still heartbeat" in refused.output
    assert runtime[0] in refused.output

    # Its worker is gone (the seed ended like a crash); the window awa-pg gives a
    # runtime passes. A view of an operator's over awa-pg's jobs is refused too, by name.
    let_runtimes_go_stale(database_url)
    sql(database_url, "CREATE VIEW public.ops_backlog AS SELECT id FROM awa.jobs")
    refused = await awa(database_url, "adopt")
    assert refused.exit_code == 1, refused.output
    assert "view public.ops_backlog" in refused.output
    # Nothing changed: awa-pg's schema and jobs are as they were.
    assert sql(database_url, "SELECT id, state::text FROM awa.jobs ORDER BY id") == awa_pg_state
    sql(database_url, "DROP VIEW public.ops_backlog")
    if engine == "canonical":
        await refusals_leave_the_database_as_it_was(database_url, awa_pg_state)

    if engine == "canonical":
        # awa-pg keeps a callback's id on a job that finished (README, differences); the
        # handler-resumed job here did not, so give it one as such a job has.
        sql(
            database_url,
            "UPDATE awa.jobs_hot SET callback_id = gen_random_uuid(), "
            f"callback_timeout_at = now() WHERE id = {ids['resolved']}",
        )
    adopted = await awa(database_url, "adopt")
    assert adopted.exit_code == 0, adopted.output
    awa_pg_engine = "canonical" if engine == "canonical" else "queue_storage"
    assert f"on awa-pg's {awa_pg_engine} engine" in adopted.output
    if engine == "queue_storage_side":
        assert "dropped awa-pg's schema(s) awa, awa_side" in adopted.output
    again = await awa(database_url, "migrate")
    assert again.exit_code == 0, again.output
    assert "Schema already at version" in again.output

    adopted_states = states(database_url, ids)
    assert adopted_states == {
        "scheduled": "scheduled",
        "available": "available",
        "unique": "available",
        "paused": "available",
        "cancelled": "cancelled",
        "completed": "completed",
        "resolved": "completed",
        "failed": "failed",
        "retryable": "retryable",
        "waiting_external": "waiting_external",
        "running": "running",
        "dead_lettered": "dlq" if seeded["dead_lettered"] else "failed",
    }
    # The running attempt keeps its lease and heartbeat; the parked one its callback.
    ((lease, heartbeat, attempt),) = sql(
        database_url,
        f"SELECT run_lease, heartbeat_at IS NOT NULL, attempt FROM awa.jobs "
        f"WHERE id = {ids['running']}",
    )
    assert (lease, heartbeat, attempt) == (1, True, 1)
    assert sql(
        database_url, f"SELECT callback_id::text FROM awa.jobs WHERE id = {ids['waiting_external']}"
    ) == [(seeded["callback_id"],)]
    # A callback ends with its attempt here: the resolved job keeps no callback id.
    assert sql(
        database_url,
        f"SELECT callback_id, callback_timeout_at FROM awa.jobs WHERE id = {ids['resolved']}",
    ) == [(None, None)]
    if seeded["dead_lettered"]:
        assert sql(database_url, "SELECT job_id, dlq_reason FROM awa.dlq_entries") == [
            (ids["dead_lettered"], "seed")
        ]
    assert sql(database_url, "SELECT name, queue, priority FROM awa.cron_jobs") == [
        ("adopt_nightly", "adopt_idle", 3)
    ]
    assert sql(database_url, "SELECT queue, display_name FROM awa.queue_descriptors") == [
        ("adopt_work", "Adopted work")
    ]
    assert sql(database_url, "SELECT kind, description FROM awa.job_kind_descriptors") == [
        ("adopt_job", "seeded")
    ]
    assert sql(database_url, "SELECT queue, paused, paused_by FROM awa.queue_meta") == [
        ("adopt_paused", True, "adopt-seed")
    ]
    (last_id,) = sql(database_url, "SELECT last_value FROM awa.jobs_id_seq")
    assert last_id[0] >= max(ids.values())

    client = AsyncClient(database_url)
    # The unique claim came along: awa-pg's key, computed the same way, still collides.
    with pytest.raises(UniqueConflict):
        await client.insert(
            AdoptArgs("unique"),
            kind="adopt_job",
            queue="adopt_idle",
            unique_opts={"by_queue": True, "by_args": True},
        )

    await client.close()

    runs = await drain(database_url, seeded)
    final = states(database_url, ids)
    # None lost, none run twice, nothing finished run again.
    assert verdict(runs, final, seeded["dead_lettered"]) == []
    assert final["waiting_external"] == "completed"


async def refusals_leave_the_database_as_it_was(
    url: str, awa_pg_state: list[tuple[Any, ...]]
) -> None:
    """What awa-pg still has in flight is refused by name, each time changing nothing."""
    sql(
        url,
        "INSERT INTO awa.batch_operations (id, op_kind, filter, spec, state) VALUES "
        "('00000000-0000-0000-0000-00000000b0b0', 'set_priority', '{}', '{}', 'running')",
    )
    refused = await awa(url, "adopt")
    assert refused.exit_code == 1
    assert "batch operation(s) 00000000-0000-0000-0000-00000000b0b0 (set_priority, running)" in (
        refused.output
    )
    sql(url, "DELETE FROM awa.batch_operations")
    sql(
        url,
        "UPDATE awa.storage_transition_state "
        "SET state = 'mixed_transition', prepared_engine = 'queue_storage'",
    )
    refused = await awa(url, "adopt")
    assert refused.exit_code == 1
    assert "storage transition is in state 'mixed_transition'" in refused.output
    sql(
        url,
        "UPDATE awa.storage_transition_state SET state = 'canonical', prepared_engine = NULL",
    )
    sql(url, "DELETE FROM awa.schema_version WHERE version = 40")
    refused = await awa(url, "adopt")
    assert refused.exit_code == 1
    assert "schema version 39; adoption takes awa-pg 0.6.9's schema (version 40)" in (
        refused.output
    )
    sql(url, "INSERT INTO awa.schema_version (version, description) VALUES (40, 'restored')")
    assert sql(url, "SELECT id, state::text FROM awa.jobs ORDER BY id") == awa_pg_state


async def test_adopt_refuses_a_database_awa_pg_did_not_migrate(migrated_database_url: str) -> None:
    refused = await awa(migrated_database_url, "adopt")
    assert refused.exit_code == 1
    assert "was not migrated by awa-pg, so there is nothing to adopt" in refused.output


@pytest.mark.slow
async def test_the_database_owner_adopts_without_superuser(
    awa_pg_python: Path, pg_databases: DatabaseFactory
) -> None:
    """As managed Postgres runs it: awa-pg migrated and used the database as a
    NOSUPERUSER role that owns it, and the same role adopts it and drains it (awa-pg's
    migrations run in full here, which takes a while: hence slow)."""
    with owned_database(pg_databases) as conninfo:
        # awa-pg takes URLs only.
        part = psycopg.conninfo.conninfo_to_dict(conninfo)
        url = (
            f"postgresql://{part['user']}:{part['password']}@{part.get('host', '127.0.0.1')}"
            f":{part.get('port', 5432)}/{part['dbname']}"
        )
        seeded = await asyncio.to_thread(seed, awa_pg_python, url, "queue_storage")
        let_runtimes_go_stale(url)
        adopted = await awa(url, "adopt")
        assert adopted.exit_code == 0, adopted.output
        runs = await drain(url, seeded)
        assert verdict(runs, states(url, seeded["jobs"]), seeded["dead_lettered"]) == []
