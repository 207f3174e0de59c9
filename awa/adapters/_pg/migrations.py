"""The single forward-only migration stream shared by both Postgres engines.

Migration files live in ``awa/adapters/_pg/migrations/`` and are named
``NNNN_description.sql``. Versions 1..99 belong to the canonical engine and the public SQL
surface; versions 100 and up belong to the queue-storage engine. Files are discovered by
pattern, so adding a migration means adding a file. Applied versions are recorded in
``awa.schema_version``.
"""

from __future__ import annotations

import functools
import logging
import re
from importlib import resources

import psycopg

from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, connect
from awa.domain.errors import SchemaNotMigrated

log = logging.getLogger(__name__)

_FILE_PATTERN = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

#: Session advisory lock serialising concurrent ``migrate`` calls ("AWA_MIGR").
MIGRATION_LOCK_KEY = 0x4157415F4D494752

#: Migrations below this version belong to the canonical engine and the SQL surface.
QUEUE_STORAGE_FIRST_VERSION = 100

Migration = tuple[int, str, str]


@functools.cache
def _load() -> tuple[Migration, ...]:
    directory = resources.files("awa.adapters._pg").joinpath("migrations")
    found: dict[int, Migration] = {}
    for entry in directory.iterdir():
        match = _FILE_PATTERN.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migration files share version {version}")
        description = match.group(2).replace("_", " ")
        found[version] = (version, description, entry.read_text(encoding="utf-8"))
    return tuple(found[v] for v in sorted(found))


def migrations() -> list[Migration]:
    """Every migration as ``(version, description, sql)``, oldest first.

    The SQL is returned without being applied, so it can be printed or reviewed.
    """
    return list(_load())


def migrations_range(from_version: int, to_version: int) -> list[Migration]:
    """Migrations with ``from_version < version <= to_version``."""
    return [m for m in _load() if from_version < m[0] <= to_version]


def current_migration_version() -> int:
    """The newest schema version this package knows."""
    loaded = _load()
    return loaded[-1][0] if loaded else 0


#: Later migrations the canonical engine's statements depend on: 397 defines
#: ``awa.run_at_in_range``, which its claims and promotion call.
CANONICAL_LATER_VERSIONS = (397,)


def canonical_schema_version() -> int:
    """The newest version the canonical engine and the public SQL surface need."""
    versions = [m[0] for m in _load() if m[0] < QUEUE_STORAGE_FIRST_VERSION]
    return max([*versions, *CANONICAL_LATER_VERSIONS], default=0)


async def applied_version(conn: DictConnection) -> int:
    """``max(version)`` recorded in the database; 0 when nothing was ever applied."""
    cur = await conn.execute("SELECT to_regclass('awa.schema_version') IS NOT NULL AS present")
    row = await cur.fetchone()
    if row is None or not row["present"]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) AS version FROM awa.schema_version")
    row = await cur.fetchone()
    return int(row["version"]) if row is not None else 0


def refuse_newer(db_version: int) -> None:
    """Raise ``SchemaNotMigrated`` if the database is newer than this package."""
    known = current_migration_version()
    if db_version > known:
        raise SchemaNotMigrated(
            f"database schema version {db_version} is newer than this package supports "
            f"(latest known migration: {known}); upgrade the package"
        )


async def require_schema(conn: DictConnection, *, minimum: int) -> int:
    """Check the database is migrated to at least ``minimum``.

    A newer schema is accepted with a warning: migrations only add, so the usual rollout
    (migrate first, then roll the workers) runs the previous release on the new schema
    for a while. Only ``migrate`` refuses a newer database."""
    version = await applied_version(conn)
    known = current_migration_version()
    if version > known:
        log.warning(
            "database schema version %d is newer than this package knows (%d); running on "
            "it, as during a rollout. Upgrade the package to use what the newer schema adds",
            version,
            known,
        )
    if version < minimum:
        raise SchemaNotMigrated(
            f"database schema version {version} is older than required ({minimum}); "
            "run `awa migrate`"
        )
    return version


async def migrate(database_url: str) -> None:
    """Apply every pending migration. Idempotent and safe to call from many processes.

    A session advisory lock serialises concurrent callers; each migration runs in its own
    transaction together with its ``awa.schema_version`` row. A database migrated by a
    newer package is refused with :class:`SchemaNotMigrated`.
    """
    conn = await connect(database_url)
    try:
        await _migrate_locked(conn)
    except psycopg.Error as exc:
        raise map_error(exc) from exc
    finally:
        await conn.close()


async def refuse_gaps(conn: DictConnection, db_version: int) -> None:
    """Raise ``SchemaNotMigrated`` if a known migration below ``db_version`` was never applied.

    The stream is applied strictly in order, so a hole means the database was migrated by a
    build whose stream differed from this one; applying the missing step out of order could
    undo later steps, so it is refused rather than skipped silently.
    """
    if db_version == 0:
        return
    cur = await conn.execute("SELECT version FROM awa.schema_version")
    recorded = {int(row["version"]) for row in await cur.fetchall()}
    missing = [number for number, _, _ in _load() if number < db_version and number not in recorded]
    if missing:
        raise SchemaNotMigrated(
            f"database schema version {db_version} lacks earlier migrations {missing}; it was "
            "migrated by a different build of the migration stream and must be rebuilt"
        )


async def _migrate_locked(conn: DictConnection) -> None:
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    try:
        version = await applied_version(conn)
        refuse_newer(version)
        await refuse_gaps(conn, version)
        for number, description, sql in migrations_range(version, current_migration_version()):
            async with conn.transaction():
                await conn.execute(sql.encode())
                await conn.execute(
                    "INSERT INTO awa.schema_version (version, description, applied_at) "
                    "VALUES (%s, %s, clock_timestamp())",
                    (number, description),
                )
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
