"""The single forward-only migration stream shared by both Postgres engines.

Migration files live in ``awa/adapters/_pg/migrations/`` and are named
``NNNN_description.sql``. Versions 1..99 belong to the canonical engine and the public SQL
surface; versions 100 and up belong to the queue-storage engine. Files are discovered by
pattern, so adding a migration means adding a file. Applied versions are recorded in
``awa.schema_version`` with the SHA-256 of their file; a released file that changed is
refused. After the stream, the schema's functions and views are applied from their own
files (:mod:`awa.adapters._pg.schema_objects`, ADR 0012).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from importlib import resources

import psycopg
from psycopg import sql as pgsql

from awa.adapters._pg import adopt as awa_pg
from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters._pg.schema_objects import apply_schema_objects
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import MigrationChanged, SchemaNotMigrated

log = logging.getLogger(__name__)

_FILE_PATTERN = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

#: Transaction-scoped advisory lock serialising concurrent ``migrate`` calls ("AWA_MIGR").
MIGRATION_LOCK_KEY = 0x4157415F4D494752

#: Migrations below this version belong to the canonical engine and the SQL surface.
QUEUE_STORAGE_FIRST_VERSION = 100

#: The first migration recorded with its checksum as it is applied (it adds the column);
#: rows of earlier ones get theirs once the stream has run.
CHECKSUM_VERSION = 480

#: Checksums of released migration files whose text changed after some database applied
#: them, accepted besides the file's current checksum. Only edits whose effect the schema
#: files now supersede are listed: 350 (the lean-claims step first kept prune's prebuilt
#: stand-ins, then dropped only the queue ring's; awa.queue_storage_install_spares now
#: rebuilds any stand-in whose shape is stale) and 397 (its install function first left
#: out the retire-mark step; awa.install_queue_storage now defines the install).
HISTORICAL_CHECKSUMS: dict[int, frozenset[str]] = {
    350: frozenset(
        {
            "05cf508006db3a5ef9c17579fd90f2727cd59aa270ce0f832d761db0e1486382",
            "6eef46652df79dadde5960c036428492445559cf64c8551ba4c2d9b13ff00c71",
        }
    ),
    397: frozenset({"f9a8e70207a4fb62cf71452c1e136c299754e7918205aba0a0b7c11cb47fcc09"}),
}

Migration = tuple[int, str, str]


def checksum(sql: str) -> str:
    """The SHA-256 recorded for a migration file's text."""
    return hashlib.sha256(sql.encode()).hexdigest()


@functools.cache
def _files() -> dict[int, str]:
    """Migration file name by version."""
    directory = resources.files("awa.adapters._pg").joinpath("migrations")
    found: dict[int, str] = {}
    for entry in directory.iterdir():
        match = _FILE_PATTERN.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migration files share version {version}")
        found[version] = entry.name
    return found


@functools.cache
def _load() -> tuple[Migration, ...]:
    directory = resources.files("awa.adapters._pg").joinpath("migrations")
    loaded = []
    for version, name in sorted(_files().items()):
        match = _FILE_PATTERN.match(name)
        assert match is not None
        description = match.group(2).replace("_", " ")
        sql = directory.joinpath(name).read_text(encoding="utf-8")
        loaded.append((version, description, sql))
    return tuple(loaded)


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


async def awa_pg_refusal(conn: DictConnection, version: int | None = None) -> str | None:
    """If awa-pg migrated this database, what to tell the caller (run ``awa adopt``);
    else ``None``. ``version`` is the applied version when the caller has read it."""
    if version is None:
        version = await applied_version(conn)
    origin = await awa_pg.awa_pg_version(conn) if version > 0 else None
    return None if origin is None else awa_pg.not_adopted_message(origin)


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
        adopt_first = await awa_pg_refusal(conn, version)
        if adopt_first is not None:
            raise SchemaNotMigrated(adopt_first)
        raise SchemaNotMigrated(
            f"database schema version {version} is older than required ({minimum}); "
            "run `awa migrate`"
        )
    return version


async def migrate(database_url: str) -> None:
    """Apply every pending migration. Idempotent and safe to call from many processes.

    A database that awa-pg migrated is refused with :class:`SchemaNotMigrated` naming
    ``awa adopt`` (:func:`adopt`), which converts it.

    A transaction-scoped advisory lock serialises concurrent callers. The pending migrations, their
    ``awa.schema_version`` rows and the schema files run in one transaction: a failure
    leaves the database at the version it had. A database migrated by a newer package is
    refused with :class:`SchemaNotMigrated`. The role needs no superuser: owning the
    database (or the ``awa`` schema and every queue-storage schema) is enough.
    """
    conn = await connect(database_url)
    try:
        await _migrate_locked(conn, adopt=False)
    except psycopg.Error as exc:
        raise map_error(exc) from exc
    finally:
        await conn.close()


async def adopt(database_url: str) -> awa_pg.AdoptionReport:
    """Convert a database that awa-pg 0.6.9 migrated into this package's schema, in place
    and in one transaction, keeping every job in its state (ADR 0019); what it brought.

    Refused with :class:`~awa.domain.errors.AdoptionRefused` (nothing changed) while an
    awa-pg runtime heartbeats, a batch operation or a storage transition of awa-pg's is
    unfinished, or an object outside awa-pg's schemas depends on them; with
    :class:`SchemaNotMigrated` on a database awa-pg did not migrate."""
    conn = await connect(database_url)
    try:
        report = await _migrate_locked(conn, adopt=True)
    except psycopg.Error as exc:
        raise map_error(exc) from exc
    finally:
        await conn.close()
    assert report is not None
    return report


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


async def refuse_changed(conn: DictConnection, db_version: int) -> list[int]:
    """Raise :class:`MigrationChanged` if a migration the database applied differs from
    this package's file of the same version; return the applied versions that have no
    checksum recorded yet.

    A recorded checksum must be the file's (or one of :data:`HISTORICAL_CHECKSUMS`). Rows
    written before checksums were recorded are compared by description, which catches a
    version number that once belonged to another migration.
    """
    if db_version == 0:
        return []
    column = ", checksum" if db_version >= CHECKSUM_VERSION else ", NULL::text AS checksum"
    cur = await conn.execute(
        f"SELECT version, description{column} FROM awa.schema_version ORDER BY version".encode()
    )
    by_version = {version: (description, sql) for version, description, sql in _load()}
    unrecorded = []
    for row in await cur.fetchall():
        version = int(row["version"])
        known = by_version.get(version)
        if known is None:
            continue  # newer than this package: refused by refuse_newer, or running on it
        description, sql = known
        name = _files()[version]
        if row["description"] != description:
            raise MigrationChanged(
                f"the database recorded migration {version} as {row['description']!r}, but "
                f"{name} is {description!r}: it was migrated by a different build of the "
                "migration stream and must be rebuilt",
                version=version,
                file=name,
            )
        recorded = row["checksum"]
        if recorded is None:
            unrecorded.append(version)
        elif recorded != checksum(sql) and recorded not in HISTORICAL_CHECKSUMS.get(
            version, frozenset()
        ):
            raise MigrationChanged(
                f"migration file {name} changed after this database applied it (recorded "
                f"sha256 {recorded}, file {checksum(sql)}): a released migration is never "
                "edited; restore the file and put the change in a new migration, or in the "
                "schema file of the function or view it changes",
                version=version,
                file=name,
            )
    return unrecorded


async def _migrate_locked(conn: DictConnection, *, adopt: bool) -> awa_pg.AdoptionReport | None:
    # All or nothing: a failure anywhere leaves the database at ``version``. The lock is
    # transaction-scoped and taken first, so a pooler in transaction mode can neither
    # strand it on a server session nor release it under us, and the applied version is
    # read under it.
    report = None
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        version = await applied_version(conn)
        origin = await awa_pg.awa_pg_version(conn) if version > 0 else None
        if origin is not None and not adopt:
            raise SchemaNotMigrated(awa_pg.not_adopted_message(origin))
        if origin is None and adopt:
            raise SchemaNotMigrated(
                "this database was not migrated by awa-pg, so there is nothing to adopt: "
                "run `awa migrate`"
            )
        stash = None
        if origin is not None:
            # Its schema goes; the stream installs this package's from nothing.
            stash = await awa_pg.stash_and_drop(conn, origin)
            version = 0
        refuse_newer(version)
        await refuse_gaps(conn, version)
        unrecorded = await refuse_changed(conn, version)
        pending = migrations_range(version, current_migration_version())
        scoped = False
        if pending:
            await _check_queue_storage_schemas(conn, version)
            scoped = await _scope_namespace_scans(conn)
        for number, description, sql in pending:
            await conn.execute(sql.encode())
            await _record_applied(conn, number, description, sql)
        if scoped:
            await conn.execute(_query("end_namespace_scope").encode())
        unrecorded += [number for number, _, _ in pending if number < CHECKSUM_VERSION]
        await _record_checksums(conn, unrecorded)
        if await apply_schema_objects(conn):
            # Installed queue-storage schemas follow the install function's steps.
            await conn.execute("SELECT awa.queue_storage_refresh()")
        if stash is not None:
            report = await awa_pg.restore(conn, stash)
    if pending:
        log.info(
            "migrated the database from schema version %d to %d",
            version,
            pending[-1][0],
        )
    return report


def _query(name: str) -> str:
    return load_queries("awa.adapters._pg", "migrations.sql")[name]


async def _check_queue_storage_schemas(conn: DictConnection, version: int) -> None:
    """Before the stream runs: drop queue-storage schemas left behind by a dropped ``awa``
    schema, and refuse a queue-storage schema this role may not use, which the stream's
    upgrade steps must reach (they would skip it, see :func:`_scope_namespace_scans`).

    On a database with no migration applied, a schema holding a queue-storage ring is an
    orphan: ``DROP SCHEMA awa CASCADE`` took the types its tables were built on (and
    their columns with them) and the sequence its job ids came from, so it can neither be
    upgraded nor read; the stream's upgrade loops would fail on it every time.
    """
    cur = await conn.execute(_query("queue_storage_schemas").encode())
    rows = await cur.fetchall()
    schemas = [(str(row["schema"]), bool(row["usable"])) for row in rows]
    if version == 0:
        orphans = [str(row["schema"]) for row in rows if row["complete"] and row["schema"] != "awa"]
        if orphans:
            log.warning(
                "dropping queue-storage schema(s) %s: the database has no awa schema (it "
                "was dropped), which took the types and the job id sequence their tables "
                "depend on, so they can be neither upgraded nor read",
                ", ".join(orphans),
            )
        for name in orphans:
            template = _query("drop_orphaned_schema")
            await conn.execute(pgsql.SQL(template).format(schema=pgsql.Identifier(name)))
        return
    unusable = [name for name, usable in schemas if not usable]
    if unusable:
        raise SchemaNotMigrated(
            f"the role migrating may not use queue-storage schema(s) {', '.join(unusable)}, "
            "which every upgrade reaches: run `awa migrate` as their owner, or grant this "
            "role USAGE on them (and make it their owner)"
        )


async def _scope_namespace_scans(conn: DictConnection) -> bool:
    """Let the released migrations' loops over ``pg_namespace`` see only the schemas this
    role may use (see ``scope_namespace_scans`` in ``migrations.sql``); whether it was
    needed. Their files stay byte-identical, as the checksums of databases that applied
    them require (ADR 0012)."""
    cur = await conn.execute(_query("unusable_schema_count").encode())
    row = await cur.fetchone()
    if row is None or int(row["unusable"]) == 0:
        return False
    cur = await conn.execute(_query("may_create_temp").encode())
    row = await cur.fetchone()
    if row is None or not row["allowed"]:
        raise SchemaNotMigrated(
            "migrating as a role that may not use every schema (pg_toast, for one) needs "
            "the TEMPORARY privilege on the database for the duration of `awa migrate`: "
            "GRANT TEMPORARY ON DATABASE <database> TO <role>, or migrate as a superuser"
        )
    await conn.execute(_query("scope_namespace_scans").encode())
    return True


async def _record_applied(conn: DictConnection, number: int, description: str, sql: str) -> None:
    if number < CHECKSUM_VERSION:
        await conn.execute(
            "INSERT INTO awa.schema_version (version, description, applied_at) "
            "VALUES (%s, %s, clock_timestamp())",
            (number, description),
        )
        return
    await conn.execute(
        "INSERT INTO awa.schema_version (version, description, applied_at, checksum) "
        "VALUES (%s, %s, clock_timestamp(), %s)",
        (number, description, checksum(sql)),
    )


async def _record_checksums(conn: DictConnection, versions: list[int]) -> None:
    """Record the current files' checksums for applied versions that have none: those
    applied before the column existed (by this run or by an older package)."""
    if not versions:
        return
    by_version = {version: sql for version, _, sql in _load()}
    async with conn.cursor() as cur:
        await cur.executemany(
            "UPDATE awa.schema_version SET checksum = %s WHERE version = %s AND checksum IS NULL",
            [(checksum(by_version[version]), version) for version in versions],
        )
