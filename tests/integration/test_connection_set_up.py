"""A new direct connection is set up in one round trip after its start-up: the pooler
probe also sets the session's time zone, on the connection's own backend only."""

from __future__ import annotations

import pytest

from awa.adapters._pg.pool import connect, is_pooled
from tests.support.wire import WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


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
