"""Hot statements whose rows are read at once run on a cursor their connection keeps
(``run(..., reuse=True)``): a new cursor per statement built its adapters and every
column's and parameter's converter again. In a pipeline each statement keeps a cursor of
its own, since its rows are read only after the sync."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters.postgres_queue_storage.statements import run
from awa.domain.job import JobSpec
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def conn(migrated_database_url: str) -> AsyncIterator[DictConnection]:
    c = await connect(migrated_database_url)
    try:
        yield c
    finally:
        await c.close()


async def test_statements_read_at_once_share_the_connections_cursor(conn: DictConnection) -> None:
    first = await run(conn, b"SELECT %(v)s::int AS v", {"v": 1}, prepare=True, reuse=True)
    assert await first.fetchall() == [{"v": 1}]
    second = await run(conn, b"SELECT %(v)s::text AS w, 2 AS n", {"v": "x"}, reuse=True)
    assert second is first
    assert await second.fetchall() == [{"w": "x", "n": 2}]
    # Without reuse, a cursor of its own.
    other = await run(conn, b"SELECT 3 AS v", reuse=False)
    assert other is not first
    assert await other.fetchall() == [{"v": 3}]


async def test_in_a_pipeline_each_statement_keeps_its_own_rows(conn: DictConnection) -> None:
    async with conn.pipeline():
        a = await run(conn, b"SELECT %(v)s::int AS v", {"v": 1}, reuse=True)
        b = await run(conn, b"SELECT %(v)s::int AS v", {"v": 2}, reuse=True)
    assert a is not b
    assert await a.fetchall() == [{"v": 1}]
    assert await b.fetchall() == [{"v": 2}]


async def test_a_closed_kept_cursor_is_replaced(conn: DictConnection) -> None:
    first = await run(conn, b"SELECT 1 AS v", reuse=True)
    await first.close()
    second = await run(conn, b"SELECT 2 AS v", reuse=True)
    assert second is not first
    assert await second.fetchall() == [{"v": 2}]


async def test_claims_run_on_the_kept_connections_cursor(migrated_database_url: str) -> None:
    async with installed_engine(migrated_database_url, "qs_reused_cursor") as engine:
        await engine.enqueue_many([JobSpec(kind="k", queue="q", args={"i": i}) for i in range(6)])
        ids = []
        cursors = set()
        for _ in range(6):
            claims = await engine.claim("q", limit=1)
            assert len(claims) == 1
            ids.append(claims[0].job.id)
            for kept in engine._parts.connections.kept["claim"].idle:
                cursor = getattr(kept, "_awa_reused_cursor", None)
                if cursor is not None:
                    cursors.add(id(cursor))
        # Every job once, in order, and the claims after the first (which planned the
        # slot's statement in a pipeline) ran on one kept cursor per connection.
        assert ids == sorted(ids) and len(set(ids)) == 6
        assert 1 <= len(cursors) <= len(engine._parts.connections.kept["claim"].idle)
