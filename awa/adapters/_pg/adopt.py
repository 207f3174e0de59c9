"""Adopting, in place, a database that awa-pg 0.6.9 migrated (ADR 0019).

awa-pg's schema shares the name ``awa`` with this package's but not its tables, so the
two cannot be migrated into each other. Adoption runs inside ``migrate``'s one
transaction, under its lock: it refuses while anything still uses awa-pg's schema, locks
every table of it, copies every job (from whichever of awa-pg's engines holds it), the
DLQ, unique claims, cron schedules, queue metadata and descriptors into temporary tables,
drops awa-pg's schemas, lets the migration stream install this package's schema from
nothing, and writes the copies into it. Jobs land in canonical storage, each in the
state, attempt and lease it had. A failure anywhere leaves awa-pg's database as it was.
There is no way back: this package never writes awa-pg's schema.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psycopg
from psycopg import sql as pgsql

from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import AdoptionRefused

log = logging.getLogger(__name__)

#: The schema version awa-pg 0.6.9 migrates to (its ``current_migration_version()``).
AWA_PG_VERSION = 40

#: awa-pg storage states adoption takes: all jobs are then where its jobs view and its
#: canonical tables show them. A transition in flight is finished or aborted first.
ADOPTABLE_STATES = ("canonical", "active")

#: How long adoption waits for a lock on awa-pg's tables before giving up (a session
#: that holds one is still using the database).
LOCK_TIMEOUT = "30s"

COMMAND = "awa adopt"


@dataclasses.dataclass(frozen=True)
class Stash:
    """What :func:`stash_and_drop` took out of awa-pg's database, for :func:`restore`."""

    awa_pg_engine: str
    dropped_schemas: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class AdoptionReport:
    """What an adoption brought over, counted in this package's schema after it."""

    awa_pg_engine: str
    dropped_schemas: tuple[str, ...]
    jobs: dict[str, int]
    dlq: int
    cron: int
    queues: int
    queue_descriptors: int
    kind_descriptors: int
    unique_claims: int


def _query(name: str) -> str:
    return load_queries("awa.adapters._pg", "adopt.sql")[name]


async def _rows(conn: DictConnection, name: str, params: Any = None) -> list[dict[str, Any]]:
    cur = await conn.execute(_query(name).encode(), params)
    return list(await cur.fetchall())


async def _run(conn: DictConnection, name: str, schema: str | None = None) -> None:
    if schema is None:
        await conn.execute(_query(name).encode())
        return
    await conn.execute(pgsql.SQL(_query(name)).format(schema=pgsql.Identifier(schema)))


async def awa_pg_version(conn: DictConnection) -> int | None:
    """The schema version of a database awa-pg migrated, or ``None`` if awa-pg did not
    migrate it. The caller has checked that ``awa.schema_version`` exists."""
    rows = await _rows(conn, "awa_pg_marker")
    if not rows or not rows[0]["awa_pg"]:
        return None
    return int(rows[0]["version"])


def not_adopted_message(version: int) -> str:
    """What ``migrate`` says of a database awa-pg migrated: the way out."""
    return (
        f"this database was migrated by awa-pg (schema version {version}); this package's "
        f"schema is not awa-pg's. Stop awa-pg's workers, then run `{COMMAND}` to convert it "
        "in place, keeping every job (one-way: awa-pg cannot open it afterwards; see "
        "docs/migrating-from-awa-pg.md)"
    )


async def stash_and_drop(conn: DictConnection, version: int) -> Stash:
    """Refuse unless awa-pg's database can be adopted now, then copy what it holds into
    temporary tables and drop its schemas. Runs inside the migrating transaction."""
    if version != AWA_PG_VERSION:
        raise AdoptionRefused(
            f"awa-pg migrated this database to schema version {version}; adoption takes "
            f"awa-pg 0.6.9's schema (version {AWA_PG_VERSION}): run `awa migrate` with "
            "awa-cli 0.6.9 first"
            if version < AWA_PG_VERSION
            else f"awa-pg migrated this database to schema version {version}, newer than "
            f"awa-pg 0.6.9's ({AWA_PG_VERSION}), whose schema adoption knows"
        )
    storage = (await _rows(conn, "awa_pg_storage"))[0]
    if storage["state"] not in ADOPTABLE_STATES:
        raise AdoptionRefused(
            f"awa-pg's storage transition is in state {storage['state']!r}: finish it "
            "(`awa storage finalize`) or abort it (`awa storage abort`) with awa-cli 0.6.9, "
            "then adopt"
        )
    await _refuse_live_runtimes(conn)
    schemas = [str(row["schema"]) for row in await _rows(conn, "awa_pg_schemas")]
    await _lock(conn, schemas)
    await _refuse_live_runtimes(conn)  # again, now that no snapshot can be written
    batches = await _rows(conn, "awa_pg_open_batch_operations")
    if batches:
        listed = ", ".join(f"{row['id']} ({row['op_kind']}, {row['state']})" for row in batches)
        raise AdoptionRefused(
            f"awa-pg batch operation(s) {listed} have not finished: let a worker finish "
            "them or cancel them (`awa batch-ops cancel`) with awa-cli 0.6.9, then adopt"
        )
    dependents = await _rows(conn, "outside_dependents", {"schemas": schemas})
    if dependents:
        listed = ", ".join(f"{row['kind']} {row['name']}" for row in dependents)
        raise AdoptionRefused(
            f"adoption drops awa-pg's schema(s) {', '.join(schemas)}, which {listed} "
            "depend(s) on: drop them first and create them again on this package's schema "
            "afterwards"
        )
    await _run(conn, "stash_jobs")
    await _run(conn, "stash_dlq")
    for schema in schemas:
        if schema != "awa":
            await _run(conn, "stash_substrate_dlq", schema)
    await _run(conn, "unstash_dead_lettered")
    for schema in schemas:
        await _run(conn, "stash_open_receipts", schema)
    await _run(conn, "stash_rest")
    for schema in reversed(schemas):
        await _run(conn, "drop_schema", schema)
    engine = "queue_storage" if storage["state"] == "active" else "canonical"
    log.warning(
        "adopting a database awa-pg 0.6.9 migrated (on its %s engine): dropped its "
        "schema(s) %s after copying their jobs; this package's schema replaces them",
        engine,
        ", ".join(schemas),
    )
    return Stash(awa_pg_engine=engine, dropped_schemas=tuple(schemas))


async def restore(conn: DictConnection, stash: Stash) -> AdoptionReport:
    """Write what :func:`stash_and_drop` copied into this package's freshly installed
    schema (canonical storage), in the same transaction."""
    await _run(conn, "restore")
    await conn.execute(_query("record_adoption").encode(), {"engine": stash.awa_pg_engine})
    counts = (await _rows(conn, "adopted_counts"))[0]
    await _run(conn, "drop_stash")
    return AdoptionReport(
        awa_pg_engine=stash.awa_pg_engine,
        dropped_schemas=stash.dropped_schemas,
        jobs={str(state): int(n) for state, n in dict(counts["jobs"]).items()},
        dlq=int(counts["dlq"]),
        cron=int(counts["cron"]),
        queues=int(counts["queues"]),
        queue_descriptors=int(counts["queue_descriptors"]),
        kind_descriptors=int(counts["kind_descriptors"]),
        unique_claims=int(counts["unique_claims"]),
    )


async def _refuse_live_runtimes(conn: DictConnection) -> None:
    live = await _rows(conn, "awa_pg_live_runtimes")
    if not live:
        return
    names = tuple(
        f"{row['id']} ({row['hostname'] or '?'} pid {row['pid']}, awa-pg {row['version']}, "
        f"last seen {row['last_seen_at'].isoformat(timespec='seconds')})"
        for row in live
    )
    raise AdoptionRefused(
        f"{len(names)} awa-pg runtime(s) still heartbeat: {'; '.join(names)}. Stop every "
        "awa-pg worker first (a runtime counts as stopped 30 s after its last snapshot, "
        "or 3 snapshot intervals if longer)",
        runtimes=tuple(str(row["id"]) for row in live),
    )


async def _lock(conn: DictConnection, schemas: list[str]) -> None:
    """Lock every table of awa-pg's schemas, so no producer commits a job after the copy."""
    tables = await _rows(conn, "awa_pg_tables", {"schemas": schemas})
    if not tables:
        return
    names = pgsql.SQL(", ").join(
        pgsql.Identifier(str(row["schema"]), str(row["name"])) for row in tables
    )
    cur = await conn.execute("SELECT current_setting('lock_timeout') AS previous")
    previous = await cur.fetchone()
    await conn.execute("SELECT set_config('lock_timeout', %s, true)", (LOCK_TIMEOUT,))
    try:
        await conn.execute(pgsql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(names))
    except psycopg.errors.LockNotAvailable:
        raise AdoptionRefused(
            f"another session kept awa-pg's tables locked for {LOCK_TIMEOUT}: a worker or "
            "producer still uses the database; stop them, then adopt"
        ) from None
    restored = "0" if previous is None else str(previous["previous"])
    await conn.execute("SELECT set_config('lock_timeout', %s, true)", (restored,))
