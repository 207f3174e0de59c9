"""A batch operation's steps on Postgres while another transaction writes the operation
(a second maintenance leader, overlapping briefly): the guard on the state is part of each
step's write, so a step that waited for a finish sees it and changes nothing, and a finish
that waited for an add sweeps the items the add put in."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from awa.adapters.postgres_canonical import CanonicalEngine
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

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Long enough for a statement that waits for the other transaction to be seen waiting.
SETTLE = 0.5


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[CanonicalEngine]:
    opened = await CanonicalEngine.open(migrated_database_url)
    try:
        yield opened
    finally:
        await opened.close()


async def _running(engine: CanonicalEngine, items: list[int]) -> BatchOperation:
    op = await engine.create_batch_operation(
        spec=BatchSpec(BatchOpKind.SET_PRIORITY, priority=4), filter=BatchFilter()
    )
    await engine.next_batch_operation(runner="runner")
    await engine.add_batch_items(op.id, items)
    running = await engine.start_batch_running(op.id, cursor={"after_job_id": 0})
    assert running.state == BatchOpState.RUNNING
    return running


async def test_steps_that_wait_for_a_finish_change_nothing(
    engine: CanonicalEngine, migrated_database_url: str
) -> None:
    op = await _running(engine, [1, 2, 3])
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
                engine.finish_batch_operation(
                    op.id, state=BatchOpState.COMPLETED, retention=DEFAULT_RETENTION
                ),
                engine.start_batch_running(op.id, cursor={"after_job_id": 9}),
                engine.add_batch_items(op.id, [4]),
                engine.record_batch_items(
                    op.id, [ItemResult(1, ItemOutcome.PROCESSED)], cursor={"after_job_id": 1}
                ),
            )
        ]
        await asyncio.wait(steps, timeout=SETTLE)
        assert not any(step.done() for step in steps), "a step did not wait for the finish"
        await held.commit()
        answers = await asyncio.gather(*steps)
    finished = await engine.get_batch_operation(op.id)
    assert finished is not None and finished.state == BatchOpState.CANCELLED
    assert answers == [finished] * len(steps)
    assert (finished.processed, finished.total_matched, finished.cursor) == (
        0,
        3,
        {"after_job_id": 0},
    )
    # The other leader's finish did not sweep its items; nothing was added to them.
    assert await engine.pending_batch_items(op.id, limit=10) == [1, 2, 3]


async def test_a_finish_that_waits_for_an_add_sweeps_its_items(
    engine: CanonicalEngine, migrated_database_url: str
) -> None:
    op = await _running(engine, [1, 2])
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
            engine.finish_batch_operation(
                op.id, state=BatchOpState.CANCELLED, retention=DEFAULT_RETENTION
            )
        )
        await asyncio.wait({finish}, timeout=SETTLE)
        assert not finish.done(), "the finish did not wait for the add"
        await held.commit()
        done = await finish
    assert (done.state, done.processed, done.skipped) == (BatchOpState.CANCELLED, 0, 3)
    assert await engine.pending_batch_items(op.id, limit=10) == []
    assert await engine.get_batch_operation(op.id) == done
