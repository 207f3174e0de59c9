"""The Postgres notifier's self-test waits on the clock it is given (ADR 0025): a
subscription whose test notification never comes back is refused after the probe
timeout of that clock, not of the host's."""

from __future__ import annotations

import anyio
import pytest

from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters._pg.pool import connect
from awa.adapters.clock import ManualClock
from awa.domain.errors import WakeupsUnavailable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Far longer than any test may take in real time: only the manual clock can reach it.
PROBE_TIMEOUT = 3600.0


async def test_a_probe_that_never_comes_back_is_given_up_on_the_clock(
    database_url: str, pg_server_url: str
) -> None:
    # The probe is sent to another database, so it never reaches the listening one (as
    # through a pooler that lends the LISTEN session away).
    clock = ManualClock()
    notifier = PostgresNotifier(
        database_url, clock=clock, probe_url=pg_server_url, probe_timeout=PROBE_TIMEOUT
    )
    started = clock.monotonic()
    with anyio.fail_after(60):
        async with clock.autojump():
            with pytest.raises(WakeupsUnavailable, match="within 3600 s"):
                await notifier.subscribe(["awa:default"])
    assert clock.monotonic() - started == PROBE_TIMEOUT


async def test_a_probe_that_comes_back_needs_no_time_of_the_clock(database_url: str) -> None:
    # A clock that never moves: the subscription proves itself as soon as its probe
    # arrives, and its waits still deliver what fires.
    clock = ManualClock()
    notifier = PostgresNotifier(database_url, clock=clock, probe_timeout=PROBE_TIMEOUT)
    with anyio.fail_after(60):
        subscription = await notifier.subscribe(["awa:default"])
        try:
            conn = await connect(database_url)
            try:
                await conn.execute('NOTIFY "awa:default"')
            finally:
                await conn.close()
            assert await subscription.wait(30) == {"awa:default"}
        finally:
            await subscription.close()
    assert clock.pending == 0
