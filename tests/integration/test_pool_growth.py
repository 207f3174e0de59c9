"""New connections: callers that wait together get them opened side by side
(``_Pool._maybe_grow_pool``): psycopg_pool alone opens one at a time, each after the last
is ready, which over a slow link made a producer's first burst of inserts wait several
connection set-ups in series."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from awa.adapters._pg.pool import (
    GROW_BESIDE,
    DictConnection,
    add_warmer,
    connect,
    is_pooled,
    open_pool,
)
from tests.support.wire import WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_callers_waiting_together_get_connections_opened_side_by_side(
    migrated_database_url: str,
) -> None:
    pool = await open_pool(migrated_database_url, max_connections=8)
    setting_up = 0
    most = 0
    enough = asyncio.Event()
    gate = asyncio.Event()
    release = asyncio.Event()

    async def slow_set_up(conn: DictConnection) -> None:
        # Every new connection's set-up waits here until the gate opens: how many are
        # being set up at once is what the pool decided to open in parallel.
        nonlocal setting_up, most
        setting_up += 1
        most = max(most, setting_up)
        if setting_up >= 1 + GROW_BESIDE:
            enough.set()
        try:
            await gate.wait()
        finally:
            setting_up -= 1

    add_warmer(pool, slow_set_up)
    served = 0

    async def caller() -> None:
        nonlocal served
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
            served += 1
            await release.wait()

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                # One caller takes the pool's open connection; five wait together.
                for _ in range(6):
                    tg.start_soon(caller)
                await enough.wait()
                assert most == 1 + GROW_BESIDE
                assert pool.get_stats()["pool_size"] == 1 + 1 + GROW_BESIDE
                gate.set()
                while served < 6:
                    await anyio.sleep(0.01)
                release.set()
        # Never more than the pool's maximum, and every caller served.
        assert pool.get_stats()["pool_size"] <= 8
        assert served == 6
    finally:
        gate.set()
        release.set()
        await pool.close()


async def test_a_new_direct_connection_is_set_up_in_one_round_trip(
    migrated_database_url: str,
) -> None:
    # The pooler probe also sets the session's time zone (on the connection's own
    # backend only): one round trip after the start-up, where the probe and SET TIME ZONE
    # took two.
    async with WireCounter(migrated_database_url) as wire:
        conn = await connect(wire.url())
        try:
            bursts = [b for b in wire.since(0) if b.executes or "Q" in b.kinds()]
            cur = await conn.execute("SHOW TimeZone")
            shown = await cur.fetchone()
        finally:
            await conn.close()
    assert len(bursts) == 1, [b.kinds() for b in bursts]
    assert not is_pooled(conn)
    assert shown is not None and shown["TimeZone"] == "UTC"
