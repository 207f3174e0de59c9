"""Direct, read-mostly database queries for commands that inspect the schema itself
(schema version, storage transition state, runtime counts) rather than jobs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from awa.adapters._pg import migrations as pg_migrations
from awa.adapters._pg import schema_objects as pg_schema_objects
from awa.adapters._pg.pool import DictConnection, connect

T = TypeVar("T")


async def with_connection(url: str, action: Callable[[DictConnection], Awaitable[T]]) -> T:
    """Open one autocommit connection, run ``action`` on it, and close it."""
    conn = await connect(url)
    try:
        return await action(conn)
    finally:
        await conn.close()


async def schema_version(conn: DictConnection) -> int:
    """The newest migration recorded in the database (0 when never migrated)."""
    return await pg_migrations.applied_version(conn)


async def pending_schema_files(conn: DictConnection) -> list[tuple[str, str]]:
    """The schema files the next ``migrate`` applies, as ``(path, sql)``."""
    return [(obj.path, obj.sql) for obj in await pg_schema_objects.pending_schema_objects(conn)]


async def relation_exists(conn: DictConnection, name: str) -> bool:
    """Whether the table or view ``name`` (schema-qualified) exists."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (name,))
    row = await cur.fetchone()
    return bool(row and row["present"])


async def function_exists(conn: DictConnection, signature: str) -> bool:
    """Whether the function ``signature`` (e.g. ``awa.storage_status()``) exists."""
    cur = await conn.execute("SELECT to_regprocedure(%s) IS NOT NULL AS present", (signature,))
    row = await cur.fetchone()
    return bool(row and row["present"])


async def fetch_optional(
    conn: DictConnection, query: str, params: tuple[Any, ...] = ()
) -> dict[str, Any] | None:
    """The first row of ``query`` as a dict, or ``None``."""
    cur = await conn.execute(query.encode(), params)
    row = await cur.fetchone()
    return None if row is None else dict(row)


async def transition_state(conn: DictConnection) -> dict[str, Any] | None:
    """The storage transition singleton row, or ``None`` if the table does not exist."""
    if not await relation_exists(conn, "awa.storage_transition_state"):
        return None
    return await fetch_optional(conn, "SELECT * FROM awa.storage_transition_state")


_RUNTIME_COUNTS = """
SELECT count(*) FILTER (WHERE live) AS live,
       count(*) FILTER (WHERE live AND NOT healthy) AS unhealthy,
       count(*) FILTER (WHERE live AND storage_capability = 'queue_storage')
           AS live_queue_storage_capable,
       count(*) FILTER (WHERE live AND storage_capability <> 'queue_storage')
           AS live_canonical_only
FROM (
    SELECT healthy, storage_capability,
           last_seen_at > now() - make_interval(
               secs => greatest(snapshot_interval_ms * 3, 30000) / 1000.0) AS live
    FROM awa.runtime_instances
) AS r
"""


async def runtime_counts(conn: DictConnection) -> dict[str, int] | None:
    """Counts of live / unhealthy runtimes by capability, or ``None`` without the table."""
    if not await relation_exists(conn, "awa.runtime_instances"):
        return None
    row = await fetch_optional(conn, _RUNTIME_COUNTS)
    return {} if row is None else {k: int(v or 0) for k, v in row.items()}


#: Logical queues a live runtime serves (a striped queue reports ``name#N`` lanes).
SERVED_QUEUES = """
SELECT DISTINCT split_part(q ->> 'name', '#', 1) AS queue
FROM awa.runtime_instances AS r, jsonb_array_elements(r.queues) AS q
WHERE awa.runtime_is_live(r.last_seen_at, r.snapshot_interval_ms, r.shutting_down)
"""
