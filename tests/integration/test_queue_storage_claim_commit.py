"""A claim's transaction commits without waiting for the WAL flush, and only that
transaction: the connection it ran on keeps its own setting afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_claim_commit"
QUEUE = "quiet"


class _Behind(SystemClock):
    """A producer whose clock runs late: its jobs land behind the lane's tail."""

    def now(self) -> datetime:
        return super().now() - timedelta(seconds=5)


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        # Every claim row records the commit mode of the transaction that wrote it.
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {SCHEMA}.commit_modes (mode text);"
                f"CREATE FUNCTION {SCHEMA}.note_commit_mode() RETURNS trigger "
                "LANGUAGE plpgsql AS $f$ BEGIN "
                f"INSERT INTO {SCHEMA}.commit_modes "
                "VALUES (current_setting('synchronous_commit')); RETURN NULL; END $f$;"
                f"CREATE TRIGGER note_commit_mode AFTER INSERT ON {SCHEMA}.claims "
                f"FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.note_commit_mode()"
            )
        yield opened


def _modes(migrated_database_url: str) -> list[str]:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT mode FROM {SCHEMA}.commit_modes").fetchall()
        conn.execute(f"TRUNCATE {SCHEMA}.commit_modes")
    return [row[0] for row in rows]


async def _session_modes(engine: QueueStorageEngine) -> set[str]:
    modes = set()
    await engine._parts.claims.drain()  # the next slot's warm-up, if one is running
    for conn in engine._parts.connections.kept["claim"].idle:
        cur = await conn.execute("SHOW synchronous_commit")
        row = await cur.fetchone()
        assert row is not None
        modes.add(row["synchronous_commit"])
    async with engine._pool.connection() as pooled:
        cur = await pooled.execute("SHOW synchronous_commit")
        row = await cur.fetchone()
        assert row is not None
        modes.add(row["synchronous_commit"])
    return modes


async def test_the_common_claim_commits_without_waiting_for_the_flush(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])
    claims = await engine.claim(QUEUE, limit=3)
    assert len(claims) == 3
    assert _modes(migrated_database_url) == ["off"] * 3
    assert await _session_modes(engine) == {"on"}


async def test_the_sorted_claim_commits_without_waiting_for_the_flush(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    behind = await QueueStorageEngine.open(
        migrated_database_url, clock=_Behind(), backoff=Backoff(), schema=SCHEMA
    )
    try:
        # Two batches in one lane, the second behind the first's order key, more than
        # one claim takes: the window must be sorted.
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(4)])
        await behind.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(4)])
    finally:
        await behind.close()
    claims = await engine.claim(QUEUE, limit=2)
    assert len(claims) == 2
    assert QUEUE in engine._parts.claims._sorting
    assert _modes(migrated_database_url) == ["off"] * 2
    assert await _session_modes(engine) == {"on"}
