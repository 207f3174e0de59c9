"""Migration checksums: every applied migration records the SHA-256 of its file, and
migrate refuses a database whose released migration no longer matches its file."""

from __future__ import annotations

import psycopg
import pytest

from awa.adapters._pg import migrations as migrations_module
from awa.adapters._pg.migrations import (
    HISTORICAL_CHECKSUMS,
    checksum,
    migrate,
    migrations,
)
from awa.domain.errors import MigrationChanged, SchemaNotMigrated
from tests.support.schema_history import migrate_as_before

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _recorded(url: str) -> dict[int, tuple[str, str | None]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version, description, checksum FROM awa.schema_version")
        return {int(v): (str(d), c) for v, d, c in rows.fetchall()}


def _expected() -> dict[int, tuple[str, str | None]]:
    return {version: (description, checksum(sql)) for version, description, sql in migrations()}


async def test_every_applied_migration_records_its_file_checksum(database_url: str) -> None:
    await migrate(database_url)
    assert _recorded(database_url) == _expected()


async def test_an_edited_released_migration_is_refused_naming_its_file(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate(database_url)
    edited = tuple(
        (v, d, sql + "\n-- edited after release\n" if v == 350 else sql)
        for v, d, sql in migrations()
    )
    monkeypatch.setattr(migrations_module, "_load", lambda: edited)
    with pytest.raises(MigrationChanged) as refused:
        await migrate(database_url)
    assert refused.value.file == "0350_queue_storage_lean_claims.sql"
    assert refused.value.version == 350
    assert "0350_queue_storage_lean_claims.sql" in str(refused.value)
    assert isinstance(refused.value, SchemaNotMigrated)


async def test_a_historical_checksum_of_a_released_migration_is_accepted(
    database_url: str,
) -> None:
    """0350 and 0397 were edited after some databases applied them; those databases
    record an older checksum and still migrate (the schema files supersede the edits)."""
    await migrate(database_url)
    (older, *_) = sorted(HISTORICAL_CHECKSUMS[350])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.schema_version SET checksum = %s WHERE version = 350", (older,))
    await migrate(database_url)
    assert _recorded(database_url)[350] == ("queue storage lean claims", older)


async def test_a_database_migrated_before_checksums_records_them_on_first_run(
    database_url: str,
) -> None:
    migrate_as_before(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        column = conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = 'awa.schema_version'::regclass "
            "AND attname = 'checksum'"
        ).fetchone()
    assert column is None
    await migrate(database_url)
    assert _recorded(database_url) == _expected()


async def test_a_version_that_held_another_migration_is_refused(database_url: str) -> None:
    """Before checksums, two migrations once took version 395; a database that applied
    the other one under it is refused by its recorded description."""
    migrate_as_before(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.schema_version SET description = 'run at bounds' WHERE version = 395"
        )
    with pytest.raises(MigrationChanged) as refused:
        await migrate(database_url)
    assert refused.value.file == "0395_ring_maintenance_outcomes.sql"
    assert "'run at bounds'" in str(refused.value)
    with psycopg.connect(database_url, autocommit=True) as conn:
        newest = conn.execute("SELECT max(version) FROM awa.schema_version").fetchone()
    assert newest == (432,)  # nothing was applied
