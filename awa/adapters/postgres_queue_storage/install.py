"""Installing the queue-storage engine's tables in a schema."""

from __future__ import annotations

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.migrations import migrate
from awa.adapters._pg.pool import connect
from awa.adapters._pg.sql import load_queries
from awa.adapters.postgres_queue_storage.statements import PACKAGE
from awa.domain.validation import LEASE_SLOT_COUNT, QUEUE_SLOT_COUNT, validate_schema_name

DEFAULT_SCHEMA = "awa"


async def install_queue_storage(
    url: str,
    schema: str = DEFAULT_SCHEMA,
    *,
    queue_slot_count: int = QUEUE_SLOT_COUNT,
    lease_slot_count: int = LEASE_SLOT_COUNT,
    reset: bool = False,
) -> None:
    """Install (or, with ``reset``, rebuild) the engine's tables in ``schema``.

    Migrates the database first; schema ``awa`` is installed by the migration itself and
    refuses ``reset``. A schema name that breaks the schema-name rule is refused with
    ``ValidationError`` before anything is written.
    """
    validate_schema_name(schema)
    await migrate(url)
    conn = await connect(url)
    try:
        async with translated_errors():
            await conn.execute(
                load_queries(PACKAGE, "admin.sql")["install"].encode(),
                {
                    "schema": schema,
                    "queue_slots": queue_slot_count,
                    "lease_slots": lease_slot_count,
                    "reset": reset,
                },
            )
    finally:
        await conn.close()
