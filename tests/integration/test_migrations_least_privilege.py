"""Migrations as the role managed Postgres gives: it owns the database, it is no superuser.

The whole chain runs as a ``NOSUPERUSER`` owner and ends with the catalog a superuser's
migration leaves (the committed snapshot), then a worker drains jobs as that role. A
migration that fails leaves the version the database had; a queue-storage schema left by
a dropped ``awa`` schema is dropped, by name, instead of failing every ``migrate``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from awa import AsyncClient, Job
from awa.adapters._pg import migrations as pg_migrations
from awa.adapters._pg.migrations import current_migration_version, migrate, migrations
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.errors import AwaError, DatabaseError, SchemaNotMigrated
from awa.domain.job import JobSpec
from tests.integration.test_migrations import SNAPSHOT, render_catalog
from tests.support.pg import DatabaseFactory
from tests.support.roles import owned_database
from tests.support.schema_history import migrate_as_before

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Tick:
    n: int


@pytest.fixture
def owner_url(pg_databases: DatabaseFactory) -> Iterator[str]:
    with owned_database(pg_databases) as url:
        yield url


def _versions(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM awa.schema_version ORDER BY version").fetchall()
    return [row[0] for row in rows]


def _is_superuser(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row is not None
    return bool(row[0])


async def test_the_whole_chain_runs_as_a_nosuperuser_owner_and_a_worker_drains(
    owner_url: str,
) -> None:
    assert not _is_superuser(owner_url)
    await migrate(owner_url)
    assert _versions(owner_url) == [version for version, _, _ in migrations()]
    # The same catalog as a superuser's migration: nothing was skipped.
    assert render_catalog(owner_url) == SNAPSHOT.read_text(encoding="utf-8")
    await migrate(owner_url)  # and again: a no-op

    total = 40
    done: set[int] = set()
    all_done = asyncio.Event()
    async with AsyncClient(owner_url) as client:
        await client.install_queue_storage()

        @client.task(Tick)
        async def tick(job: Job[Tick]) -> None:
            done.add(job.args.n)
            if len(done) == total:
                all_done.set()

        await client.insert_many_copy([Tick(n) for n in range(total)])
        await client.start([("default", 4)], poll_interval_ms=50)
        try:
            await asyncio.wait_for(all_done.wait(), 10)
        finally:
            await client.shutdown()
        stats = {s.queue: s for s in await client.queue_stats()}
        assert stats["default"].completed_last_hour == total
        assert stats["default"].total_queued == 0
    assert done == set(range(total))


async def test_the_owner_rotates_and_prunes_the_ring(owner_url: str) -> None:
    """Maintenance's DDL (prune's detach, rename, attach and truncate) as the owner."""
    await migrate(owner_url)
    await install_queue_storage(owner_url, schema="owned_ring", queue_slot_count=4)
    engine = await QueueStorageEngine.open(owner_url, schema="owned_ring")
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        for _ in range(8):
            await engine.enqueue_many([JobSpec(kind="noop", queue="q")] * 3)
            claims = await engine.claim("q", limit=10)
            acks = await engine.complete([claim.lease for claim in claims])
            assert {ack.value for ack in acks} == {"applied"}
            outcomes[await engine.rotate_queue_ring()] += 1
            outcomes["prune:" + await engine.prune_oldest()] += 1
    finally:
        await engine.close()
    assert outcomes["rotated"] == 8 and outcomes["prune:pruned"] > 0, outcomes


async def test_a_failing_migration_leaves_the_version_the_database_had(
    database_url: str,
) -> None:
    migrate_as_before(database_url, 100)
    # Migration 0200 creates this type; one already there makes it fail, after 0101 ran.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TYPE awa.storage_status_row AS (x int)")
    with pytest.raises(DatabaseError, match="storage_status_row"):
        await migrate(database_url)
    assert max(_versions(database_url)) == 100
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT to_regprocedure('awa.queue_storage_upgrade(text)') AS from_0101"
        ).fetchone()
    assert row is not None and row[0] is None, "0101 must have been rolled back with 0200"


async def test_a_chain_failing_midway_as_the_owner_leaves_nothing(owner_url: str) -> None:
    # Not a queue-storage schema (only its ring_state table): the stream's upgrade loop
    # of 0101 reaches it and fails, after 0001 ... 0100 ran in the same transaction.
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA mine")
        conn.execute("CREATE TABLE mine.ring_state (x int)")
    with pytest.raises(AwaError, match="mine"):
        await migrate(owner_url)
    with psycopg.connect(owner_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT to_regnamespace('awa') IS NULL AS no_awa,"
            " to_regclass('mine.ring_state') IS NOT NULL AS mine_kept"
        ).fetchone()
    assert row == (True, True)


async def _migrate_to(url: str, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migrate ``url`` with this package's runner, up to ``version`` only (an older
    release's stream, without the schema files that need the newest)."""

    async def no_schema_files(conn: object) -> list[str]:
        return []

    async def no_checksums(conn: object, versions: list[int]) -> None:
        return None

    with monkeypatch.context() as patch:
        patch.setattr(pg_migrations, "current_migration_version", lambda: version)
        patch.setattr(pg_migrations, "apply_schema_objects", no_schema_files)
        patch.setattr(pg_migrations, "_record_checksums", no_checksums)
        await migrate(url)


async def test_a_queue_storage_schema_the_owner_may_not_use_is_refused_by_name(
    owner_url: str, pg_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _migrate_to(owner_url, 300, monkeypatch)
    assert max(_versions(owner_url)) == 300
    superuser = psycopg.conninfo.make_conninfo(
        owner_url, user=psycopg.conninfo.conninfo_to_dict(pg_server_url).get("user", "postgres")
    )
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA someone_elses")
        conn.execute("SELECT awa.install_queue_storage('someone_elses', 4, 2)")
    with pytest.raises(SchemaNotMigrated, match="someone_elses"):
        await migrate(owner_url)
    assert max(_versions(owner_url)) == 300


async def test_an_orphaned_queue_storage_schema_is_dropped_by_name(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = migrated_database_url
    async with AsyncClient(url) as client:
        await client.install_queue_storage(schema="survivor", queue_slot_count=4)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA awa CASCADE")
    caplog.set_level(logging.WARNING, logger="awa")
    await migrate(url)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("survivor" in message and "dropping" in message for message in warnings)
    assert max(_versions(url)) == current_migration_version()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('survivor') IS NULL AS gone").fetchone()
    assert row == (True,)
    async with AsyncClient(url) as client:
        job: Job[Any] = await client.insert(Tick(1))
        assert (await client.get_job(job.id)).id == job.id


async def test_an_owner_without_the_temporary_privilege_is_told_what_to_grant(
    owner_url: str, pg_server_url: str
) -> None:
    params = psycopg.conninfo.conninfo_to_dict(owner_url)
    database, role = str(params["dbname"]), str(params["user"])
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        for grantee in ("PUBLIC", role):
            admin.execute(
                psycopg.sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(
                    psycopg.sql.Identifier(database),
                    psycopg.sql.SQL(grantee)
                    if grantee == "PUBLIC"
                    else psycopg.sql.Identifier(grantee),
                )
            )
    with pytest.raises(SchemaNotMigrated, match="GRANT TEMPORARY ON DATABASE"):
        await migrate(owner_url)
    with psycopg.connect(owner_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('awa') IS NULL AS untouched").fetchone()
    assert row == (True,)
