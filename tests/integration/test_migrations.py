"""The migration stream: idempotent, concurrency-safe, versioned, and free of drift.

The drift test compares a catalog dump of a freshly migrated database (tables, columns,
types, defaults, constraints, indexes, views, functions with argument lists, triggers,
enum labels, sequences, plus a checksum of every migration file and of every schema file)
with the committed ``schema_snapshot.txt``, and the readable DDL of the same database
(``tests/support/ddl.py``) with the committed ``docs/internals/schema.sql``. Prune's
stand-ins (``<table>_<slot>_spare``) are left out: each has its partition's shape, which
``test_schema_objects`` checks. After
changing the schema on purpose, regenerate both with::

    AWA_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/integration/test_migrations.py -k drift
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from pathlib import Path

import psycopg
import pytest

from awa.adapters._pg.migrations import (
    QUEUE_STORAGE_FIRST_VERSION,
    current_migration_version,
    migrate,
    migrations,
    migrations_range,
)
from awa.adapters._pg.schema_objects import schema_objects
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.errors import SchemaNotMigrated
from tests.support.ddl import render_ddl
from tests.support.schema_history import LAST_VERSION_BEFORE_SCHEMA_FILES

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SNAPSHOT = Path(__file__).with_name("schema_snapshot.txt")
DDL = Path(__file__).parents[2] / "docs" / "internals" / "schema.sql"

_CATALOG_QUERIES: list[tuple[str, str]] = [
    (
        "enum",
        """SELECT t.typname, e.enumlabel
           FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
           JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE n.nspname = 'awa' ORDER BY t.typname, e.enumsortorder""",
    ),
    (
        "column",
        """SELECT c.relname, c.relkind::text, a.attnum, a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  coalesce(pg_get_expr(d.adbin, d.adrelid), '')
           FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE n.nspname = 'awa' AND c.relkind IN ('r', 'v', 'p', 'm', 'f')
             AND a.attnum > 0 AND NOT a.attisdropped AND c.relname !~ '_spare$'
           ORDER BY c.relname, a.attnum""",
    ),
    (
        "constraint",
        """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
           FROM pg_constraint WHERE connamespace = 'awa'::regnamespace
             AND conrelid::regclass::text !~ '_spare$'
           ORDER BY 1, 2""",
    ),
    (
        "index",
        """SELECT tablename, indexname, indexdef FROM pg_indexes
           WHERE schemaname = 'awa' AND tablename !~ '_spare$' ORDER BY 1, 2""",
    ),
    # A view's deparsed definition differs between Postgres major versions, so only its
    # name is recorded here; its columns are in "column" and its text in the file checksums.
    (
        "view",
        """SELECT viewname FROM pg_views WHERE schemaname = 'awa' ORDER BY 1""",
    ),
    (
        "function",
        """SELECT p.proname, pg_get_function_arguments(p.oid),
                  pg_get_function_result(p.oid), md5(pg_get_functiondef(p.oid))
           FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace
           ORDER BY 1, 2""",
    ),
    (
        "trigger",
        """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
           FROM pg_trigger
           WHERE NOT tgisinternal
             AND tgrelid IN (SELECT oid FROM pg_class
                             WHERE relnamespace = 'awa'::regnamespace)
           ORDER BY 1, 2""",
    ),
    (
        "sequence",
        """SELECT sequencename, data_type::text, start_value, increment_by
           FROM pg_sequences WHERE schemaname = 'awa' ORDER BY 1""",
    ),
]


def render_catalog(url: str) -> str:
    """A stable text dump of the ``awa`` schema's catalog plus file checksums."""
    lines = [
        f"migration|{version}|{description}|{hashlib.sha256(sql.encode()).hexdigest()}"
        for version, description, sql in migrations()
    ]
    lines += [f"schema_file|{obj.path}|{obj.sha256}" for obj in schema_objects()]
    with psycopg.connect(url, autocommit=True) as conn:
        for label, query in _CATALOG_QUERIES:
            for row in conn.execute(query.encode()).fetchall():
                lines.append("|".join([label, *(str(value) for value in row)]))
    return "\n".join(lines) + "\n"


def _versions(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM awa.schema_version ORDER BY version").fetchall()
    return [row[0] for row in rows]


async def test_migrate_records_every_version_and_twice_is_a_no_op(database_url: str) -> None:
    await migrate(database_url)
    first = render_catalog(database_url)
    await migrate(database_url)
    assert _versions(database_url) == [version for version, _, _ in migrations()]
    assert max(_versions(database_url)) == current_migration_version()
    assert render_catalog(database_url) == first


async def test_concurrent_migrates_both_succeed(database_url: str) -> None:
    await asyncio.gather(*(migrate(database_url) for _ in range(3)))
    assert _versions(database_url) == [version for version, _, _ in migrations()]


async def test_newer_database_is_refused_by_migrate_but_opens(database_url: str) -> None:
    await migrate(database_url)
    future = current_migration_version() + 1000
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.schema_version (version, description) VALUES (%s, 'future')",
            (future,),
        )
    with pytest.raises(SchemaNotMigrated) as refused:
        await migrate(database_url)
    assert str(future) in str(refused.value)
    assert str(current_migration_version()) in str(refused.value)
    # A worker of the previous release still opens on it (migrate first, then roll).
    engine = await CanonicalEngine.open(database_url)
    await engine.close()


async def test_a_hole_in_the_applied_stream_is_refused(database_url: str) -> None:
    await migrate(database_url)
    skipped = migrations()[1][0]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM awa.schema_version WHERE version = %s", (skipped,))
    with pytest.raises(SchemaNotMigrated) as refused:
        await migrate(database_url)
    assert f"[{skipped}]" in str(refused.value)


async def test_engine_refuses_an_unmigrated_database(database_url: str) -> None:
    with pytest.raises(SchemaNotMigrated):
        await CanonicalEngine.open(database_url)


def test_migrations_are_ordered_and_ranges_are_half_open() -> None:
    all_migrations = migrations()
    versions = [version for version, _, _ in all_migrations]
    assert versions == sorted(set(versions)) and versions[0] == 1
    assert current_migration_version() == versions[-1]
    assert all(isinstance(sql, str) and sql.strip() for _, _, sql in all_migrations)
    assert "CREATE TABLE awa.schema_version" in all_migrations[0][2]
    assert [m[0] for m in migrations_range(0, 1)] == [1]
    assert [m[0] for m in migrations_range(1, versions[-1])] == versions[1:]
    assert migrations_range(versions[-1], versions[-1] + 10) == []
    assert migrations_range(0, versions[-1]) == all_migrations
    canonical = [v for v in versions if v < QUEUE_STORAGE_FIRST_VERSION]
    assert canonical == list(range(1, len(canonical) + 1))


def test_migrations_after_the_schema_files_define_no_function_or_view() -> None:
    """Functions and views have their one definition in a schema file (ADR 0012); a
    migration newer than those released before the files changes tables and data only."""
    defining = [
        version
        for version, _, sql in migrations()
        if version > LAST_VERSION_BEFORE_SCHEMA_FILES
        and re.search(r"\bCREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW)\b", sql, re.I)
    ]
    assert defining == []


async def test_no_schema_drift_from_the_committed_snapshot(database_url: str) -> None:
    """Drift: a fresh replay must equal ``schema_snapshot.txt`` (see module docstring)."""
    await migrate(database_url)
    rendered = render_catalog(database_url)
    if os.environ.get("AWA_UPDATE_SCHEMA_SNAPSHOT"):
        SNAPSHOT.write_text(rendered, encoding="utf-8")
    assert SNAPSHOT.exists(), "no schema snapshot; regenerate it (see the module docstring)"
    expected = SNAPSHOT.read_text(encoding="utf-8")
    if rendered != expected:
        added = sorted(set(rendered.splitlines()) - set(expected.splitlines()))
        removed = sorted(set(expected.splitlines()) - set(rendered.splitlines()))
        pytest.fail(
            "schema drift against schema_snapshot.txt\n"
            + "\n".join([*(f"+ {line}" for line in added), *(f"- {line}" for line in removed)])
        )


async def test_no_drift_in_the_readable_ddl(database_url: str) -> None:
    """``docs/internals/schema.sql`` is what a fresh replay's catalog says (module docstring)."""
    await migrate(database_url)
    rendered = render_ddl(database_url)
    if os.environ.get("AWA_UPDATE_SCHEMA_SNAPSHOT"):
        DDL.parent.mkdir(exist_ok=True)
        DDL.write_text(rendered, encoding="utf-8")
    assert DDL.exists(), "no docs/internals/schema.sql; regenerate it (see the module docstring)"
    expected = DDL.read_text(encoding="utf-8")
    assert rendered == expected, (
        "docs/internals/schema.sql is stale: regenerate it with AWA_UPDATE_SCHEMA_SNAPSHOT=1 "
        "(see the module docstring)"
    )
