"""A queue-storage engine installed into its own schema, for tests of one engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.policies import Backoff


@asynccontextmanager
async def installed_engine(
    database_url: str, schema: str, *, queue_slot_count: int = 4, lease_slot_count: int = 8
) -> AsyncIterator[QueueStorageEngine]:
    """Install queue storage into ``schema`` (a small ring) and open an engine on it."""
    await install_queue_storage(
        database_url, schema, queue_slot_count=queue_slot_count, lease_slot_count=lease_slot_count
    )
    engine = await QueueStorageEngine.open(
        database_url, clock=SystemClock(), backoff=Backoff(), schema=schema
    )
    try:
        yield engine
    finally:
        await engine.close()
