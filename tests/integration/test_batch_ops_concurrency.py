"""A batch operation's steps on the Postgres operation store while another transaction
writes the operation (a second maintenance leader, overlapping briefly): the guard on the
state is part of each step's write, so a step that waited for a finish sees it and changes
nothing, and a finish that waited for an add sweeps the items the add put in."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.domain.batch_ops import (
    DEFAULT_RETENTION,
    BatchFilter,
    BatchOperation,
    BatchOpKind,
    BatchOpState,
    BatchSpec,
    ItemOutcome,
    ItemResult,
)
from awa.entrypoints.routing import postgres_control_plane
from awa.ports.batch_ops import BatchOperationStore
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def watch(migrated_database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection that reads the server's activity, outside any transaction."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        yield conn


async def lock_waiters(watch: psycopg.AsyncConnection[Any], like: str = "%") -> int:
    """How many sessions of this test's database wait on a lock, running a statement
    matching ``like`` (the test database is this test's alone)."""
    cur = await watch.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        " AND pid <> pg_backend_pid() AND query LIKE %s",
        (like,),
    )
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def waited_on(watch: psycopg.AsyncConnection[Any], n: int, what: str) -> None:
    """Wait until ``n`` sessions wait on a lock (none finished instead)."""

    async def seen() -> bool:
        return await lock_waiters(watch) == n

    await until(seen, what)


@pytest.fixture
async def store(migrated_database_url: str) -> AsyncIterator[BatchOperationStore]:
    pool = await open_pool(migrated_database_url)
    try:
        yield postgres_control_plane(pool, SystemClock()).batch_operations
    finally:
        await pool.close()


async def _running(store: BatchOperationStore, items: list[int]) -> BatchOperation:
    op = await store.create_batch_operation(
        spec=BatchSpec(BatchOpKind.SET_PRIORITY, priority=4), filter=BatchFilter()
    )
    await store.next_batch_operation(runner="runner")
    await store.add_batch_items(op.id, items)
    running = await store.start_batch_running(op.id, cursor={"after_job_id": 0})
    assert running.state == BatchOpState.RUNNING
    return running


async def test_steps_that_wait_for_a_finish_change_nothing(
    store: BatchOperationStore,
    migrated_database_url: str,
    watch: psycopg.AsyncConnection[Any],
) -> None:
    op = await _running(store, [1, 2, 3])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        # Another leader's finish, not committed yet.
        await held.execute(
            "UPDATE awa.batch_operations SET state = 'cancelled', finalized_at = now(),"
            " retention_until = now(), updated_at = now() WHERE id = %s",
            (uuid.UUID(op.id),),
        )
        steps = [
            asyncio.create_task(step)
            for step in (
                store.finish_batch_operation(
                    op.id, state=BatchOpState.COMPLETED, retention=DEFAULT_RETENTION
                ),
                store.start_batch_running(op.id, cursor={"after_job_id": 9}),
                store.add_batch_items(op.id, [4]),
                store.record_batch_items(
                    op.id, [ItemResult(1, ItemOutcome.PROCESSED)], cursor={"after_job_id": 1}
                ),
            )
        ]
        # Each step waits on the operation's row (the first on the finish's transaction,
        # the others queued behind it), so none can answer before the commit.
        await waited_on(watch, len(steps), "every step waits for the finish")
        assert not any(step.done() for step in steps), "a step did not wait for the finish"
        await held.commit()
        answers = await asyncio.gather(*steps)
    finished = await store.get_batch_operation(op.id)
    assert finished is not None and finished.state == BatchOpState.CANCELLED
    assert answers == [finished] * len(steps)
    assert (finished.processed, finished.total_matched, finished.cursor) == (
        0,
        3,
        {"after_job_id": 0},
    )
    # The other leader's finish did not sweep its items; nothing was added to them.
    assert await store.pending_batch_items(op.id, limit=10) == [1, 2, 3]


async def test_a_finish_that_waits_for_an_add_sweeps_its_items(
    store: BatchOperationStore,
    migrated_database_url: str,
    watch: psycopg.AsyncConnection[Any],
) -> None:
    op = await _running(store, [1, 2])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        # Another leader's scan page, not committed yet, holding the operation as an add does.
        await held.execute(
            "SELECT 1 FROM awa.batch_operations WHERE id = %s FOR SHARE", (uuid.UUID(op.id),)
        )
        await held.execute(
            "INSERT INTO awa.batch_operation_items (operation_id, job_id) VALUES (%s, 3)",
            (uuid.UUID(op.id),),
        )
        finish = asyncio.create_task(
            store.finish_batch_operation(
                op.id, state=BatchOpState.CANCELLED, retention=DEFAULT_RETENTION
            )
        )
        await waited_on(watch, 1, "the finish waits for the add")
        assert not finish.done(), "the finish did not wait for the add"
        await held.commit()
        done = await finish
    assert (done.state, done.processed, done.skipped) == (BatchOpState.CANCELLED, 0, 3)
    assert await store.pending_batch_items(op.id, limit=10) == []
    assert await store.get_batch_operation(op.id) == done


async def test_a_processed_result_recorded_after_a_skip_wins(
    store: BatchOperationStore,
    migrated_database_url: str,
    watch: psycopg.AsyncConnection[Any],
) -> None:
    """Two runners recording the same chunk (two leaders overlapping): one moved the job,
    the other then found it already moved and answers skipped. Whichever records first,
    the job counts as processed. Both records wait on the operation's row, the skip's
    first; they go in that order once it is let go."""
    op = await _running(store, [1])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as held:
        await held.execute(
            "SELECT 1 FROM awa.batch_operations WHERE id = %s FOR UPDATE", (uuid.UUID(op.id),)
        )

        async def waiting(n: int) -> bool:
            return await lock_waiters(watch, "%FOR NO KEY UPDATE%") == n

        async def record(outcome: ItemOutcome) -> None:
            await store.record_batch_items(
                op.id, [ItemResult(1, outcome)], cursor={"after_job_id": 1}
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(record, ItemOutcome.SKIPPED)
            await until(lambda: waiting(1), "the skip's record waits on the operation")
            tg.start_soon(record, ItemOutcome.PROCESSED)
            await until(lambda: waiting(2), "the move's record waits behind it")
            await held.commit()
    done = await store.get_batch_operation(op.id)
    assert done is not None
    assert (done.processed, done.skipped, done.errored) == (1, 0, 0)
    assert await store.pending_batch_items(op.id, limit=10) == []
