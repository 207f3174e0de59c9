"""The maintenance leader's prune of idle rate limiters deletes at most its batch, whatever
plan the server picks (``prune_idle_rate_limiters``).

As ``(queue, limiter) IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` the planner may
run the subquery as the inner side of a nested-loop semi join, rescanned for every row:
each rescan passes over the rows the statement already deleted (locked by itself) and
picks the next, so one call deleted every idle limiter. Which plan a server picks depends
on its statistics; the embedded test server picked it in a full run. The test forces that
plan with the planner's own switches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from awa.adapters._pg.pool import open_pool
from awa.adapters._pg.rate_limits import PgRateLimiterReader

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Leaves the planner a nested loop with a rescanned inner side and nothing else.
NESTED_LOOP_ONLY = " ".join(
    f"-c {switch}=off"
    for switch in (
        "enable_hashjoin",
        "enable_mergejoin",
        "enable_material",
        "enable_hashagg",
        "enable_sort",
        "enable_indexscan",
        "enable_indexonlyscan",
        "enable_bitmapscan",
    )
)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def reader(migrated_database_url: str) -> AsyncIterator[PgRateLimiterReader]:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        for name in ("a", "b", "c"):
            conn.execute(
                "INSERT INTO awa.rate_limiters (queue, limiter, tat, rate, burst, updated_at) "
                "VALUES ('paced', %s, %s, 1, 1, %s)",
                (name, NOW - timedelta(hours=1), NOW - timedelta(hours=1)),
            )
    url = make_conninfo(migrated_database_url, options=NESTED_LOOP_ONLY)
    pool = await open_pool(url, max_connections=2)
    try:
        yield PgRateLimiterReader(pool)
    finally:
        await pool.close()


async def test_a_prune_deletes_at_most_its_limit_under_a_nested_loop_plan(
    reader: PgRateLimiterReader,
) -> None:
    assert await reader.prune_idle_limiters(now=NOW, limit=1) == 1
    assert len(await reader.limiter_states()) == 2
    assert await reader.prune_idle_limiters(now=NOW, limit=10) == 2
    assert await reader.limiter_states() == []
