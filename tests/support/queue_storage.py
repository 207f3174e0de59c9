"""A queue-storage engine installed into its own schema, for tests of one engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from awa.adapters._pg.pool import DictConnection
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.policies import Backoff
from awa.ports.clock import Clock


@asynccontextmanager
async def installed_engine(
    database_url: str,
    schema: str,
    *,
    queue_slot_count: int = 4,
    lease_slot_count: int = 8,
    clock: Clock | None = None,
) -> AsyncIterator[QueueStorageEngine]:
    """Install queue storage into ``schema`` (a small ring) and open an engine on it
    (on the host's clock unless given one)."""
    await install_queue_storage(
        database_url, schema, queue_slot_count=queue_slot_count, lease_slot_count=lease_slot_count
    )
    engine = await QueueStorageEngine.open(
        database_url, clock=clock or SystemClock(), backoff=Backoff(), schema=schema
    )
    try:
        yield engine
    finally:
        await engine.close()


#: A comment line in the text of every form of completion by receipt.
RECEIPT_COMPLETION = "The receipt completion; its claims and closures tables"


async def prepared_plans(conn: DictConnection, marker: str) -> tuple[int, int, str]:
    """Generic and custom plans of the statements holding ``marker`` prepared on
    ``conn`` (summed over them), and its session's plan_cache_mode."""
    cur = await conn.execute(
        "SELECT coalesce(sum(generic_plans), 0) AS g, coalesce(sum(custom_plans), 0) AS c, "
        "current_setting('plan_cache_mode') AS mode "
        "FROM pg_prepared_statements WHERE statement LIKE %s",
        [f"%{marker}%"],
    )
    [row] = await cur.fetchall()
    return int(row["g"]), int(row["c"]), str(row["mode"])


async def completion_plans(engine: QueueStorageEngine) -> dict[str, int]:
    """How often completion by receipt (the ring-wide and the in-slot forms together) ran
    under a generic and under a custom plan on the connection the engine keeps for it
    (which must be idle)."""
    [conn] = engine._parts.connections.kept["complete"].idle
    generic, custom, _mode = await prepared_plans(conn, RECEIPT_COMPLETION)
    return {"generic_plans": generic, "custom_plans": custom}
