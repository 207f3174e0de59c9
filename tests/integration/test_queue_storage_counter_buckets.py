"""Counter rows are split by writer, so the hot path never waits for another kind of
writer's open transaction: a claim does not wait for a producer's counter row, and a
completion by receipt waits for neither producers nor other writers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_buckets"
QUEUE = "buckets"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


async def _hold(
    conn: psycopg.AsyncConnection[object], buckets: range, completion_buckets: range
) -> None:
    """Lock (in an open transaction) the queue's counter rows in ``buckets`` and its
    completion rows in ``completion_buckets``, creating them first, as open transactions
    of other writers would."""
    states = ["available", "running", "completed"]
    await conn.execute(
        f"INSERT INTO {SCHEMA}.queue_counts (queue, state, bucket, n) "
        "SELECT %s, st::awa.job_state, b, 0 FROM unnest(%s::text[]) st, unnest(%s::int[]) b "
        "ON CONFLICT DO NOTHING",
        (QUEUE, states, list(buckets)),
    )
    await conn.execute(
        f"INSERT INTO {SCHEMA}.completions (queue, minute, bucket, n) "
        "SELECT %s, date_trunc('minute', now()) + m * interval '1 minute', b, 0 "
        "FROM generate_series(-1, 1) m, unnest(%s::int[]) b ON CONFLICT DO NOTHING",
        (QUEUE, list(completion_buckets)),
    )
    await conn.commit()
    await conn.execute(
        f"SELECT 1 FROM {SCHEMA}.queue_counts WHERE queue = %s AND bucket = ANY(%s) FOR UPDATE",
        (QUEUE, list(buckets)),
    )
    await conn.execute(
        f"SELECT 1 FROM {SCHEMA}.completions WHERE queue = %s AND bucket = ANY(%s) FOR UPDATE",
        (QUEUE, list(completion_buckets)),
    )


async def test_claim_and_completion_do_not_wait_for_producers_counter_rows(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(3)])
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as other:
        # every counter bucket an enqueue may take (enqueues write no completion rows)
        await _hold(other, range(16), range(0))
        with anyio.fail_after(10):
            claims = await engine.claim(QUEUE, limit=3)
            assert len(claims) == 3
            assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 3
        await other.rollback()


async def test_completion_does_not_wait_for_other_writers_counter_rows(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    claims = await engine.claim(QUEUE, limit=2)
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as other:
        # producers, the claim statement and every other writer (admin, rescue, prune)
        await _hold(other, range(24), range(8))
        await other.execute(
            f"SELECT 1 FROM {SCHEMA}.queue_counts WHERE queue = %s AND bucket >= 32 FOR UPDATE",
            (QUEUE,),
        )
        with anyio.fail_after(10):
            assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 2
        await other.rollback()
    counts = {c.queue: c.counts for c in await engine.queue_counts()}[QUEUE]
    assert sum(counts.values()) == 2
