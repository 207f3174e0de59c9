"""The common claim and completion by receipt run on connections the engine keeps for
them: one after another on the same backend, more at once on pooled ones; a kept
connection that broke is replaced, and closing the engine closes them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.connections import KEPT_CONNECTIONS
from awa.domain.errors import DatabaseError
from awa.domain.job import JobSpec
from awa.ports.storage import Ack
from tests.support.queue_storage import completion_plans, installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_kept"
QUEUE = "kept"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


def _kept_pids(engine: QueueStorageEngine, purpose: str) -> list[int]:
    return [conn.info.backend_pid for conn in engine._parts.connections.kept[purpose].idle]


def _live(migrated_database_url: str, pids: list[int]) -> set[int]:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
        ).fetchall()
    return {row[0] for row in rows}


async def test_calls_in_sequence_share_one_kept_backend_each(
    engine: QueueStorageEngine,
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={"n": i}) for i in range(8)])
    for _ in range(8):
        [claim] = await engine.claim(QUEUE, limit=1)
        assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    await engine._parts.claims.drain()  # the next slot's warm-up, if one is running
    assert (
        engine._parts.connections.kept["claim"].open == 1
        and engine._parts.connections.kept["complete"].open == 1
    )
    [claimer] = _kept_pids(engine, "claim")
    [completer] = _kept_pids(engine, "complete")
    assert claimer != completer


async def test_claims_at_once_beyond_the_kept_ones_take_pooled_connections(
    engine: QueueStorageEngine,
) -> None:
    count = KEPT_CONNECTIONS + 3
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(count)])
    batches = await asyncio.gather(*(engine.claim(QUEUE, limit=1) for _ in range(count)))
    # Claims at once may find the lane taken and come back empty; the rest follow.
    ids = [c.job.id for batch in batches for c in batch]
    while len(ids) < count:
        [claim] = await engine.claim(QUEUE, limit=1)
        ids.append(claim.job.id)
    assert len(set(ids)) == count
    assert await engine.claim(QUEUE, limit=1) == []
    # a warm-up may still hold one (planning the next ring slot's claim)
    await engine._parts.claims.drain()
    assert engine._parts.connections.kept["claim"].open <= KEPT_CONNECTIONS
    assert (
        len(engine._parts.connections.kept["claim"].idle)
        == engine._parts.connections.kept["claim"].open
    )


async def test_a_broken_kept_connection_is_replaced(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert await engine.claim("elsewhere", limit=1) == []
    [pid] = _kept_pids(engine, "claim")
    with psycopg.connect(migrated_database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(DatabaseError):
        await engine.claim(QUEUE, limit=1)
    assert engine._parts.connections.kept["claim"].open == 0
    [claim] = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert _kept_pids(engine, "claim") != [pid]


async def test_closing_the_engine_closes_the_kept_connections(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    pids = _kept_pids(engine, "claim") + _kept_pids(engine, "complete")
    assert len(_live(migrated_database_url, pids)) == 2
    await engine.close()
    for _ in range(50):
        if not _live(migrated_database_url, pids):
            break
        await asyncio.sleep(0.02)
    assert _live(migrated_database_url, pids) == set()


async def test_warm_up_opens_and_prepares_the_kept_connections(
    engine: QueueStorageEngine,
) -> None:
    await engine.warm_up([QUEUE])
    assert (
        engine._parts.connections.kept["claim"].open == 1
        and engine._parts.connections.kept["complete"].open == 1
    )
    assert await completion_plans(engine) == {"generic_plans": 1, "custom_plans": 0}
    # Nothing was claimed or written: the queue is as it was.
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (
        engine._parts.connections.kept["claim"].open == 1
        and engine._parts.connections.kept["complete"].open == 1
    )


async def test_a_claim_waits_for_its_connection_lent_to_a_warm_up(
    engine: QueueStorageEngine,
) -> None:
    """While the kept claim connection plans ahead (a warm-up), a claim waits for it
    rather than open a new backend, whose first claim would load the catalog of every
    ring partition."""
    connections = engine._parts.connections
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert len(await engine.claim(QUEUE, limit=1)) == 1
    await engine._parts.claims.drain()
    [pid] = _kept_pids(engine, "claim")
    lent = asyncio.Event()
    release = asyncio.Event()

    async def warm(conn: object) -> None:
        lent.set()
        await release.wait()

    warming = asyncio.create_task(connections.warm_kept("claim", warm))
    await lent.wait()
    claiming = asyncio.create_task(engine.claim(QUEUE, limit=1))
    await asyncio.sleep(0.2)
    assert not claiming.done()
    assert connections.kept["claim"].open == 1
    release.set()
    assert len(await claiming) == 1
    await warming
    await engine._parts.claims.drain()
    assert _kept_pids(engine, "claim") == [pid]
    assert connections.kept["claim"].open == 1


async def test_a_warm_up_never_opens_a_connection(engine: QueueStorageEngine) -> None:
    ran: list[object] = []

    async def warm(conn: object) -> None:
        ran.append(conn)

    await engine._parts.connections.warm_kept("claim", warm)
    assert ran == [] and "claim" not in engine._parts.connections.kept
