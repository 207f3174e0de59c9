"""A wait of a subscription that is cancelled in the same turn of the event loop as its
notification arrives ends cancelled. On Python 3.11 ``asyncio.wait_for`` returned the
notification instead and the cancel was lost: the results store's shared listener, whose
read task its last waiter cancels and then awaits, never ended, and that waiter's
``wait_for`` hung (seen in the docs example of stored results under load)."""

from __future__ import annotations

import asyncio

import pytest

from awa.adapters._pg.notifier import PostgresSubscription
from awa.adapters._pg.pool import connect

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.mark.parametrize("timeout", [30.0, float("inf")])
async def test_a_wait_cancelled_as_its_notification_arrives_ends_cancelled(
    database_url: str, timeout: float
) -> None:
    conn = await connect(database_url)
    try:
        await conn.execute('LISTEN "awa:cancel-race"')
        subscription = PostgresSubscription(conn)
        waiting = asyncio.get_running_loop().create_task(subscription.payloads(timeout))
        for _ in range(3):
            await asyncio.sleep(0)  # the wait is parked on its event
        assert not waiting.done()
        # The notification and the cancel in one turn of the loop, before the wait runs.
        subscription._received.append(("awa:cancel-race", "1"))
        subscription._arrived.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    finally:
        await conn.close()
