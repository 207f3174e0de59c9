"""awa-pg 0.6.9 programs that reach past the documented API keep working."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

import awa
from awa import AsyncClient, Job

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Ping:
    n: int


async def test_async_client_raw_is_the_same_client_as_a_raw_client(
    migrated_database_url: str,
) -> None:
    client = AsyncClient(migrated_database_url)
    seen: list[int] = []
    done = asyncio.Event()

    @client.task(Ping, queue="raw")
    async def ping(job: Job[Ping]) -> None:
        seen.append(job.args.n)
        done.set()

    raw = client._raw
    assert isinstance(raw, awa.RawClient)
    assert client._raw is raw
    inserted = await raw.insert(Ping(1), queue="raw")
    # The blocking twin, from a plain thread, sees the same database.
    fetched = await asyncio.to_thread(raw.get_job_sync, inserted.id)
    assert fetched.id == inserted.id
    # The handlers registered on the client are the raw view's too: one runtime.
    await raw.start([("raw", 1)])
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await client.shutdown()
    assert seen == [1]
    await client.close()
    with pytest.raises(awa.DatabaseError):
        await raw.get_job(inserted.id)
