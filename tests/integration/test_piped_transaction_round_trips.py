"""Every pipelined transaction of the Postgres engines costs the round trips its reads
need and no more (ADR 0037, "A pipelined transaction"): ``BEGIN`` travels with the first
statement and ``COMMIT`` with what follows the last read
(:func:`~awa.adapters._pg.piped.piped_transaction`). psycopg's transaction block inside a
pipeline cost three round trips more: ``BEGIN`` synced alone, a sync before ``COMMIT``
and ``COMMIT`` synced alone.

Each path runs through :class:`~tests.support.wire.WireCounter`, which groups every
connection's messages into round trips. The piped transaction itself is held to its
semantics on a plain connection: committed at the end, rolled back on an error or a
cancellation with nothing written, a nested block a savepoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from awa.adapters._pg import piped
from awa.adapters._pg.piped import piped_transaction
from awa.adapters._pg.pool import DictConnection, connect, open_pool
from awa.adapters._pg.routing import PgRoutedInsert
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from tests.support.queue_storage import installed_engine
from tests.support.wire import Burst, WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_piped_rt"
QUEUE = "piped"


def _described(wire: WireCounter, bursts: list[Burst]) -> list[tuple[str, list[str]]]:
    return [(b.kinds(), [t[:50] for t in b.texts(wire.link(b).named)]) for b in bursts]


def _tx_bursts(wire: WireCounter, mark: int) -> list[Burst]:
    """The bursts since ``mark`` of the connection whose first burst began a transaction
    (the engine's other connections may run meanwhile: warm-ups, their session setup)."""
    bursts = wire.since(mark)
    begun = next(b for b in bursts if "BEGIN" in b.texts(wire.link(b).named))
    return [b for b in bursts if b.link == begun.link]


def _plain(n: int = 1) -> list[JobSpec]:
    return [JobSpec(kind="k", queue=QUEUE, args={"i": i}) for i in range(n)]


async def test_a_heartbeat_is_two_round_trips(migrated_database_url: str) -> None:
    # BEGIN with the lease locks (their slot read), the heartbeat with COMMIT (before: 6).
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        await engine.enqueue_many(_plain(2))
        claims = await engine.claim(QUEUE, limit=2)
        mark = wire.mark()
        acks = await engine.heartbeat([c.lease for c in claims])
        bursts = _tx_bursts(wire, mark)
    assert [a.name for a in acks] == ["APPLIED", "APPLIED"]
    assert len(bursts) == 2, _described(wire, bursts)
    assert "COMMIT" in bursts[-1].texts(wire.link(bursts[-1]).named)


async def test_a_completion_by_lookup_is_three_round_trips(
    migrated_database_url: str,
) -> None:
    # Claimed by another engine, so this one has no receipt: the completion looks the
    # attempts up in its transaction.
    async with (
        installed_engine(migrated_database_url, SCHEMA) as claimer,
        WireCounter(migrated_database_url) as wire,
    ):
        await claimer.enqueue_many(_plain(2))
        claims = await claimer.claim(QUEUE, limit=2)
        engine = await QueueStorageEngine.open(
            wire.url(), clock=SystemClock(), backoff=Backoff(), schema=SCHEMA
        )
        try:
            mark = wire.mark()
            acks = await engine.complete([c.lease for c in claims])
            bursts = _tx_bursts(wire, mark)
        finally:
            await engine.close()
    assert [a.name for a in acks] == ["APPLIED", "APPLIED"]
    # BEGIN with the lookup (which closes short attempts), the children waiting on them,
    # the counters with COMMIT (before: 6).
    assert len(bursts) == 3, _described(wire, bursts)
    assert "COMMIT" in bursts[-1].texts(wire.link(bursts[-1]).named)


async def test_a_batch_enqueue_is_one_round_trip(migrated_database_url: str) -> None:
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        await engine.enqueue_many(_plain(2))
        mark = wire.mark()
        records = await engine.enqueue_many(_plain(3))
        bursts = _tx_bursts(wire, mark)
    assert len(records) == 3
    # BEGIN, the enqueue and COMMIT together (before: 4).
    assert len(bursts) == 1, _described(wire, bursts)


async def test_a_unique_enqueue_is_four_round_trips_and_a_conflict_rolls_back(
    migrated_database_url: str,
) -> None:
    spec = JobSpec(kind="k", queue=QUEUE, args={}, unique_key=b"piped-key")
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={}, unique_key=b"warm")])
        mark = wire.mark()
        await engine.enqueue_many([spec])
        bursts = _tx_bursts(wire, mark)
        with pytest.raises(UniqueConflict):
            await engine.enqueue_many([*_plain(1), spec])
        # Nothing of the failed batch was written, and the pool's connections serve on.
        assert len(await engine.enqueue_many(_plain(1))) == 1
    # BEGIN with the ids, the unique key's claim, the lane positions, the rows with COMMIT
    # (before: 7).
    assert len(bursts) == 4, _described(wire, bursts)
    assert "COMMIT" in bursts[-1].texts(wire.link(bursts[-1]).named)


async def test_a_routed_insert_is_one_round_trip(migrated_database_url: str) -> None:
    async with WireCounter(migrated_database_url) as wire:
        pool = await open_pool(wire.url(), max_connections=1)
        try:
            routed = PgRoutedInsert(pool)
            await routed.insert_routed(_plain(1)[0])
            mark = wire.mark()
            record = await routed.insert_routed(_plain(1)[0])
            bursts = _tx_bursts(wire, mark)
        finally:
            await pool.close()
    assert record.id > 0
    # BEGIN, the call and COMMIT together (before: 4).
    assert len(bursts) == 1, _described(wire, bursts)


# ------------------------------------------------------------ the transaction itself
@pytest.fixture
async def table(migrated_database_url: str) -> AsyncIterator[DictConnection]:
    conn = await connect(migrated_database_url)
    try:
        await conn.execute("CREATE TABLE piped_probe (v int PRIMARY KEY)")
        yield conn
    finally:
        await conn.close()


async def _values(conn: DictConnection) -> list[int]:
    cur = await conn.execute("SELECT v FROM piped_probe ORDER BY v")
    return [row["v"] for row in await cur.fetchall()]


async def test_the_piped_transaction_commits_at_the_end(
    table: DictConnection,
) -> None:
    async with piped_transaction(table):
        await table.execute("INSERT INTO piped_probe VALUES (1)")
        cur = await table.execute("INSERT INTO piped_probe VALUES (2) RETURNING v")
    assert [r["v"] for r in await cur.fetchall()] == [2]
    assert table.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await _values(table) == [1, 2]


async def test_an_error_rolls_back_everything(table: DictConnection) -> None:
    with pytest.raises(RuntimeError):
        async with piped_transaction(table):
            await table.execute("INSERT INTO piped_probe VALUES (1)")
            raise RuntimeError("boom")
    # A statement's error, read only when the block ends (at COMMIT's sync).
    with pytest.raises(psycopg.errors.UniqueViolation):
        async with piped_transaction(table):
            await table.execute("INSERT INTO piped_probe VALUES (3)")
            await table.execute("INSERT INTO piped_probe VALUES (3)")
    assert table.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await _values(table) == []


async def _cancelled_inside(conn: DictConnection, *statements: str) -> None:
    """Send ``statements`` in a piped transaction on ``conn``, then cancel the task while
    it waits inside the block."""
    inside = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def write() -> None:
            async with piped_transaction(conn):
                for statement in statements:
                    await conn.execute(statement)
                inside.set()
                await anyio.Event().wait()

        tg.start_soon(write)
        await inside.wait()
        tg.cancel_scope.cancel()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
async def test_a_cancellation_rolls_back_everything_and_keeps_the_connection(
    table: DictConnection, migrated_database_url: str
) -> None:
    await _cancelled_inside(table, "INSERT INTO piped_probe VALUES (1)")
    # The pipeline's exit ran to its end and ROLLBACK with it: the connection is idle
    # and usable (psycopg closed it when the cancellation cut the exit short, and the
    # pool had to open a new session).
    assert not table.closed
    assert table.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await _values(table) == []
    async with await connect(migrated_database_url) as other:
        assert await _values(other) == []


async def test_a_server_that_does_not_settle_a_cancelled_transaction_loses_its_connection(
    table: DictConnection, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(piped, "SETTLE_LIMIT", 0.2)
    pid = table.info.backend_pid
    await _cancelled_inside(table, "INSERT INTO piped_probe VALUES (1)", "SELECT pg_sleep(30)")
    # The pipeline's answers did not come within the limit: the connection is closed
    # (its session's state is unknown), and the cancelled caller was not held longer.
    assert table.closed
    async with await connect(migrated_database_url) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert await _values(other) == []


async def test_a_nested_block_is_a_savepoint(table: DictConnection) -> None:
    async with piped_transaction(table):
        await table.execute("INSERT INTO piped_probe VALUES (1)")
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with table.transaction():
                await table.execute("INSERT INTO piped_probe VALUES (2)")
                await table.execute("INSERT INTO piped_probe VALUES (1)")
        await table.execute("INSERT INTO piped_probe VALUES (3)")
    assert await _values(table) == [1, 3]


async def test_it_refuses_a_connection_inside_a_transaction(
    table: DictConnection,
) -> None:
    async with table.transaction():
        with pytest.raises(psycopg.ProgrammingError):
            async with piped_transaction(table):
                pass
