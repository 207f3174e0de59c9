"""The common claim and completion by receipt run on connections the engine keeps for
them: one after another on the same backend (the claim keeps a second one, where the
next ring slot's claim is planned ahead), more at once on pooled ones; a kept connection
that broke is replaced, and closing the engine closes them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.connections import KEPT_CONNECTIONS
from awa.domain.errors import DatabaseError
from awa.domain.job import JobSpec
from awa.ports.storage import Ack
from tests.support.queue_storage import completion_plans, installed_engine
from tests.support.waits import until

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
    [claim] = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    # The first claim read the whole ring; the claim of the slot it found rows in was
    # then planned on a second kept connection, and the slot's claims go there.
    await engine._parts.claims.drain()
    assert engine._parts.connections.kept["claim"].open == 2
    used: set[int] = set()
    statements = engine._parts.claims._sql
    run_generic = statements.run_generic

    async def recorded(conn: Any, statement: bytes, params: Any) -> Any:
        if params.get("queue") == QUEUE:
            used.add(conn.info.backend_pid)
        return await run_generic(conn, statement, params)

    statements.run_generic = recorded  # type: ignore[method-assign]
    for _ in range(7):
        [claim] = await engine.claim(QUEUE, limit=1)
        assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert len(used) == 1
    assert engine._parts.connections.kept["complete"].open == 1
    [completer] = _kept_pids(engine, "complete")
    assert completer not in _kept_pids(engine, "claim")


def _last_claim_pid(engine: QueueStorageEngine) -> int:
    """The backend of the kept claim connection given back last."""
    return int(engine._parts.connections.kept["claim"].idle[-1].info.backend_pid)


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
    # The claim's warm-up opens the second kept claim connection in the background.
    await engine._parts.claims.drain()
    pids = _kept_pids(engine, "claim") + _kept_pids(engine, "complete")
    assert len(pids) == KEPT_CONNECTIONS + 1
    assert _live(migrated_database_url, pids) == set(pids)
    await engine.close()
    await until(
        lambda: not _live(migrated_database_url, pids), "the kept connections' backends ended"
    )


async def test_warm_up_opens_and_prepares_the_kept_connections(
    engine: QueueStorageEngine,
) -> None:
    await engine.warm_up([QUEUE])
    assert (
        engine._parts.connections.kept["claim"].open == KEPT_CONNECTIONS
        and engine._parts.connections.kept["complete"].open == 1
    )
    assert await completion_plans(engine) == {"generic_plans": 1, "custom_plans": 0}
    # Nothing was claimed or written: the queue is as it was.
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    [claim] = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    await engine._parts.claims.drain()
    assert (
        engine._parts.connections.kept["claim"].open == KEPT_CONNECTIONS
        and engine._parts.connections.kept["complete"].open == 1
    )


async def test_warm_up_opens_and_plans_its_connections_side_by_side(
    engine: QueueStorageEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new backend loads the ring's catalog on its own: the warm-up opens and plans
    its kept connections at once, so a worker's start waits for the longest, not the
    sum. Every opening here waits until all of them have begun."""
    connections = engine._parts.connections
    opening = connections._open_kept
    wanted = KEPT_CONNECTIONS + 1
    begun: list[str] = []
    all_begun = asyncio.Event()

    async def gated(kept: Any) -> Any:
        begun.append(next(p for p, k in connections.kept.items() if k is kept))
        if len(begun) == wanted:
            all_begun.set()
        await all_begun.wait()
        return await opening(kept)

    monkeypatch.setattr(connections, "_open_kept", gated)
    await asyncio.wait_for(engine.warm_up([QUEUE]), timeout=30)
    assert sorted(begun) == ["claim"] * KEPT_CONNECTIONS + ["complete"]
    assert connections.kept["claim"].open == KEPT_CONNECTIONS
    assert await completion_plans(engine) == {"generic_plans": 1, "custom_plans": 0}


async def test_a_claim_goes_on_while_the_other_kept_connection_plans_ahead(
    engine: QueueStorageEngine,
) -> None:
    """A warm-up (the next ring slot's claim, planned ahead) runs on the kept claim
    connection the claims are not using: a claim meanwhile neither waits for it nor
    opens a third backend."""
    connections = engine._parts.connections
    await engine.warm_up([QUEUE])
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    assert len(await engine.claim(QUEUE, limit=1)) == 1
    await engine._parts.claims.drain()
    # Given back last: the connection where the slot's claim was just planned (after the
    # ring-wide first claim), which the slot's claims use from now on.
    claiming_pid = _last_claim_pid(engine)
    lent = asyncio.Event()
    release = asyncio.Event()
    warmed: list[int] = []

    async def warm(conn: psycopg.AsyncConnection[object]) -> None:
        warmed.append(conn.info.backend_pid)
        lent.set()
        await release.wait()

    warming = asyncio.create_task(
        connections.warm_kept("claim", warm, lambda c: c.info.backend_pid == claiming_pid)
    )
    await lent.wait()
    assert warmed != [claiming_pid]
    [claim] = await asyncio.wait_for(engine.claim(QUEUE, limit=1), timeout=5)
    assert _last_claim_pid(engine) == claiming_pid
    assert connections.kept["claim"].open == KEPT_CONNECTIONS
    release.set()
    assert await warming is True
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]


async def test_a_warm_up_opens_the_second_kept_connection_rather_than_lend_the_first(
    engine: QueueStorageEngine,
) -> None:
    connections = engine._parts.connections
    assert await engine.claim(QUEUE, limit=1) == []
    await engine._parts.claims.drain()
    [first] = _kept_pids(engine, "claim")
    warmed: list[int] = []

    async def warm(conn: psycopg.AsyncConnection[object]) -> None:
        warmed.append(conn.info.backend_pid)

    assert await connections.warm_kept("claim", warm) is True
    assert len(warmed) == 1 and warmed != [first]
    assert sorted(_kept_pids(engine, "claim")) == sorted([first, *warmed])
    # It avoids the connection it is told to (the current slot's claims run there).
    assert (
        await connections.warm_kept("claim", warm, lambda c: c.info.backend_pid in warmed) is True
    )
    assert warmed[-1] == first
    # Both kept connections are open and the only idle one is refused: no third opens.
    async with connections.kept_conn("claim") as busy:
        refused = busy.info.backend_pid
        assert (
            await connections.warm_kept("claim", warm, lambda c: c.info.backend_pid != refused)
            is False
        )
    assert len(warmed) == 2 and connections.kept["claim"].open == KEPT_CONNECTIONS


async def test_a_warm_up_never_opens_the_first_connection(engine: QueueStorageEngine) -> None:
    ran: list[object] = []

    async def warm(conn: object) -> None:
        ran.append(conn)

    assert await engine._parts.connections.warm_kept("claim", warm) is False
    assert ran == [] and "claim" not in engine._parts.connections.kept


async def test_a_warm_up_lends_one_of_two_idle_connections_that_both_serve_the_current_slot(
    engine: QueueStorageEngine,
) -> None:
    """A claim and a warm-up that planned the same slot side by side leave it planned on
    both kept connections; the next warm-up (the slot the ring enters next) then takes
    the least recently used one, and the callers keep the other."""
    connections = engine._parts.connections
    assert await engine.claim(QUEUE, limit=1) == []
    await engine._parts.claims.drain()
    warmed: list[int] = []

    async def warm(conn: psycopg.AsyncConnection[object]) -> None:
        warmed.append(conn.info.backend_pid)

    assert await connections.warm_kept("claim", warm) is True
    oldest, _ = _kept_pids(engine, "claim")
    assert await connections.warm_kept("claim", warm, lambda c: True) is True
    assert warmed[-1] == oldest
    # With one of them busy, the only idle one is not lent.
    async with connections.kept_conn("claim"):
        assert await connections.warm_kept("claim", warm, lambda c: True) is False
    assert len(warmed) == 2 and connections.kept["claim"].open == KEPT_CONNECTIONS
