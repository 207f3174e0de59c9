"""Unique conflict modes (ADR 0034) through every producer surface, on both storages:
the async and blocking clients, transactions, the bulk paths, ``awa.bridge`` and the SQL
producer; and concurrent inserts of one key on real connections."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from awa import AsyncClient, Client, JobState, UniqueConflict
from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.bridge import insert_job, insert_job_sync
from awa.domain.job import JobSpec
from awa.domain.unique_conflict import (
    UNIQUE_CONFLICT_METADATA,
    ConflictMode,
    InsertOutcome,
    insert_outcome,
    with_conflict_mode,
)
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

REPLACE: dict[str, Any] = {"by_args": False, "on_conflict": "replace"}
DEBOUNCE: dict[str, Any] = {"by_args": False, "on_conflict": {"debounce": 30, "max_wait": 300}}


@dataclasses.dataclass
class Reindex:
    doc: int


@pytest.fixture(params=["canonical", "queue_storage"])
def route(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(route: str, migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        if route == "queue_storage":
            await c.install_queue_storage()
        yield c


async def _waiting(client: AsyncClient, kind: str = "reindex") -> list[Any]:
    jobs = await client.list_jobs(kind=kind)
    return [j for j in jobs if j.state in (JobState.Scheduled, JobState.Available)]


async def test_client_insert_replace_and_debounce(client: AsyncClient) -> None:
    first = await client.insert(Reindex(1), unique_opts=REPLACE)
    assert first.insert_outcome == "inserted"
    second = await client.insert(Reindex(2), unique_opts=REPLACE, priority=1)
    assert (second.id, second.insert_outcome, second.args) == (first.id, "replaced", {"doc": 2})
    assert (await client.get_job(first.id)).priority == 1
    third = await client.insert(Reindex(3), kind="debounced", unique_opts=DEBOUNCE)
    assert third.state == JobState.Scheduled and third.insert_outcome == "inserted"
    fourth = await client.insert(Reindex(4), kind="debounced", unique_opts=DEBOUNCE)
    assert (fourth.id, fourth.insert_outcome) == (third.id, "debounced")
    assert fourth.args == {"doc": 4} and fourth.run_at >= third.run_at
    # skip is today's behaviour.
    with pytest.raises(UniqueConflict):
        await client.insert(Reindex(5), unique_opts={"by_args": False})


async def test_bulk_paths_and_transactions_merge(client: AsyncClient, route: str) -> None:
    first = await client.insert(Reindex(1), unique_opts=REPLACE)
    jobs = await client.insert_many_copy([Reindex(2)], unique_opts=REPLACE)
    assert [(j.id, j.insert_outcome) for j in jobs] == [(first.id, "replaced")]
    async with await client.transaction() as tx:
        inside = await tx.insert(Reindex(3), unique_opts=REPLACE)
        assert inside.id == first.id
    assert (await client.get_job(first.id)).args == {"doc": 3}
    if route == "queue_storage":
        assert await client.enqueue_many_copy([Reindex(4)], unique_opts=REPLACE) == 1
        assert (await client.get_job(first.id)).args == {"doc": 4}
    assert len(await _waiting(client)) == 1


async def test_concurrent_inserts_leave_one_waiting_job_with_the_last_args(
    client: AsyncClient,
) -> None:
    count = 24
    results = await asyncio.gather(
        *(client.insert(Reindex(n), unique_opts=DEBOUNCE) for n in range(count))
    )
    assert len({job.id for job in results}) == 1
    (waiting,) = await _waiting(client)
    # Each insert merged on top of the one before: none was lost, and the stored args
    # are those of the insert that merged last.
    stored = waiting.metadata[UNIQUE_CONFLICT_METADATA]["inserts"]
    assert stored == count
    (last,) = [j for j in results if j.metadata[UNIQUE_CONFLICT_METADATA]["inserts"] == count]
    assert waiting.args == last.args


async def test_the_bridge_and_the_sql_producer_merge(
    client: AsyncClient, migrated_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
        row = await insert_job(conn, Reindex(1), unique_opts=DEBOUNCE)
        again = await insert_job(conn, Reindex(2), unique_opts=DEBOUNCE)
        await conn.commit()
    assert row["insert_outcome"] == "inserted" and row["state"] == "scheduled"
    assert (again["id"], again["insert_outcome"]) == (row["id"], "debounced")
    assert again["args"] == {"doc": 2}
    with psycopg.connect(migrated_database_url) as sync_conn:
        third = insert_job_sync(sync_conn, Reindex(3), unique_opts=DEBOUNCE)
    assert third["id"] == row["id"]
    # The SQL producer itself, as any language would call it.
    meta = json.dumps({UNIQUE_CONFLICT_METADATA: {"on_conflict": "replace"}})
    with psycopg.connect(migrated_database_url, autocommit=True) as sql:
        cur = sql.execute(
            "SELECT id, args, metadata FROM awa.insert_job_compat('by_sql', "
            "p_args => %s::jsonb, p_metadata => %s::jsonb, p_unique_key => '\\x01'::bytea)",
            (json.dumps({"v": 1}), meta),
        )
        one = cur.fetchone()
        cur = sql.execute(
            "SELECT id, args, metadata FROM awa.insert_job_compat('by_sql', "
            "p_args => %s::jsonb, p_metadata => %s::jsonb, p_unique_key => '\\x01'::bytea)",
            (json.dumps({"v": 2}), meta),
        )
        two = cur.fetchone()
        assert one is not None and two is not None
        assert two[0] == one[0] and two[1] == {"v": 2}
        assert two[2][UNIQUE_CONFLICT_METADATA]["inserts"] == 2
        bad = json.dumps({UNIQUE_CONFLICT_METADATA: {"on_conflict": "debounce", "window": -1}})
        with pytest.raises(psycopg.errors.CheckViolation, match="on_conflict"):
            sql.execute(
                "SELECT awa.insert_job_compat('by_sql', p_metadata => %s::jsonb, "
                "p_unique_key => '\\x02'::bytea)",
                (bad,),
            )


async def test_concurrent_sql_producers_merge(
    client: AsyncClient, migrated_database_url: str
) -> None:
    count = 12

    async def one(n: int) -> dict[str, Any]:
        async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
            row = await insert_job(conn, Reindex(n), kind="by_bridge", unique_opts=REPLACE)
            await conn.commit()
            return row

    rows = await asyncio.gather(*(one(n) for n in range(count)))
    assert len({row["id"] for row in rows}) == 1
    (waiting,) = await _waiting(client, "by_bridge")
    assert waiting.metadata[UNIQUE_CONFLICT_METADATA]["inserts"] == count


def test_blocking_client_debounces(migrated_database_url: str) -> None:
    with Client(migrated_database_url) as client:
        first = client.insert(Reindex(1), unique_opts=DEBOUNCE)
        second = client.insert(Reindex(2), unique_opts=DEBOUNCE)
        assert (second.id, second.insert_outcome) == (first.id, "debounced")
        with client.transaction() as tx:
            third = tx.insert(Reindex(3), unique_opts=DEBOUNCE)
        assert third.id == first.id
        assert client.get_job(first.id).args == {"doc": 3}


async def test_a_private_schema_engine_merges(migrated_database_url: str) -> None:
    # An engine opened on a schema of its own (outside the schemas awa.jobs covers) finds
    # the waiting holder there: replace and debounce merge rather than act as skip.
    clock = ManualClock()
    engine = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, schema="qs_unique"
    )
    replace = ConflictMode(mode="replace")
    debounce = ConflictMode(mode="debounce", window=30.0, max_wait=300.0)

    def spec(n: int, mode: ConflictMode, key: bytes) -> JobSpec:
        return JobSpec(
            kind="reindex",
            queue="private",
            args={"doc": n},
            metadata=with_conflict_mode({}, mode),
            unique_key=key,
        )

    try:
        (first,) = await engine.enqueue_many([spec(1, replace, b"r" * 16)])
        clock.advance(timedelta(seconds=5))
        (second,) = await engine.enqueue_many([spec(2, replace, b"r" * 16)])
        assert second.id == first.id and second.args == {"doc": 2}
        assert insert_outcome(second.metadata) == InsertOutcome.REPLACED
        (held,) = await engine.enqueue_many([spec(3, debounce, b"d" * 16)])
        clock.advance(timedelta(seconds=10))
        (pushed,) = await engine.enqueue_many([spec(4, debounce, b"d" * 16)])
        assert pushed.id == held.id and pushed.args == {"doc": 4}
        assert insert_outcome(pushed.metadata) == InsertOutcome.DEBOUNCED
        assert pushed.run_at == clock.now() + timedelta(seconds=30)
        stored = await engine.get_job(first.id)
        assert stored is not None and stored.args == {"doc": 2}
        rows = await sql(migrated_database_url, "SELECT count(*) AS n FROM qs_unique.jobs_resolved")
        assert rows[0]["n"] == 2
        # A holder that runs is not merged into: the insert clashes, as skip does.
        (claimed,) = await engine.claim("private", limit=1)
        assert claimed.job.id == first.id
        with pytest.raises(UniqueConflict):
            await engine.enqueue_many([spec(5, replace, b"r" * 16)])
    finally:
        await engine.close()
