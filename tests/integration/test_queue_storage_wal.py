"""Queue storage writes little WAL per job: the claim keeps two indexes, a completion by
receipt key inserts its closure without speculative insertion, and the paths that lost an
index (lookups by job id, rescue sweeps) still find their attempts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.job import JobSpec
from awa.domain.policies import Backoff
from awa.ports.storage import Ack
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "wal"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff()
    )
    try:
        yield opened
    finally:
        await opened.close()


def _one(conn: psycopg.Connection[Any], sql: str) -> str:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return str(row[0])


def _claims_indexes(url: str, schema: str) -> set[str]:
    """Index definitions of the partitioned claims table and of one of its partitions,
    with the table names taken out."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
            "JOIN pg_class c ON c.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname IN ('claims', 'claims_0')",
            (schema,),
        ).fetchall()
    return {
        f"{table}: " + definition.split(" USING ", 1)[1].split(" ", 1)[1]
        for table, definition in rows
    }


async def test_claims_keep_only_their_key_and_the_ready_probe(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    expected = {
        "claims: (slot, claim_id)",
        "claims: (slot, ready_fact)",
        "claims_0: (slot, claim_id)",
        "claims_0: (slot, ready_fact)",
    }
    assert _claims_indexes(migrated_database_url, "awa") == expected
    # Another schema, and a reinstall with reset, end up the same.
    await install_queue_storage(migrated_database_url, "awa_lean", queue_slot_count=4)
    assert _claims_indexes(migrated_database_url, "awa_lean") == expected
    await install_queue_storage(migrated_database_url, "awa_lean", queue_slot_count=4, reset=True)
    assert _claims_indexes(migrated_database_url, "awa_lean") == expected


async def test_completion_by_receipt_writes_no_speculative_insertion(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error:
            pytest.skip("pg_walinspect is not available")
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(20)])
        claims = await engine.claim(QUEUE, limit=20)
        assert len(claims) == 20
        slot = _one(conn, "SELECT DISTINCT slot FROM awa.claims")
        # rel <tablespace>/<database>/<filenode>: databases cloned from one template share
        # filenodes, so the database is part of the match.
        database = _one(conn, "SELECT oid FROM pg_database WHERE datname = current_database()")
        filenode = _one(conn, f"SELECT pg_relation_filenode('awa.closures_{slot}')")
        rel = f"/{database}/{filenode} "
        start = _one(conn, "SELECT pg_current_wal_lsn()::text")
        assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 20
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE record_type = 'HEAP_CONFIRM'), "
            "count(*) FILTER (WHERE record_type LIKE 'INSERT%%' "
            "                   AND resource_manager = 'Heap') "
            "FROM pg_get_wal_records_info(%s::pg_lsn, pg_current_wal_lsn()) "
            "WHERE strpos(block_ref, %s) > 0",
            (start, rel),
        ).fetchone()
    assert row is not None
    confirms, inserts = row
    assert inserts == 20
    assert confirms == 0


async def test_a_receipt_completion_racing_another_closure_is_stale(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The closure key arbitrates even without ON CONFLICT on the first try: a finaliser
    that commits the closure while the completion waits on its key makes it stale."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(2)])
    claims = await engine.claim(QUEUE, limit=2)
    assert len(claims) == 2
    racing, other = claims
    with psycopg.connect(migrated_database_url) as conn:
        conn.execute(
            "INSERT INTO awa.closures (slot, claim_id, fact_id, queue, outcome, finalized_at) "
            "SELECT slot, claim_id, nextval('awa.fact_seq'), queue, 'moved', now() "
            "FROM awa.claims WHERE job_id = %s AND run_lease = %s",
            (racing.job.id, racing.lease.lease),
        )
        completing = asyncio.ensure_future(engine.complete([racing.lease, other.lease]))
        # The completion's session queues behind the uncommitted closure's key.
        with psycopg.connect(migrated_database_url, autocommit=True) as watcher:

            def waiting() -> int:
                assert not completing.done(), "the completion should wait on the closure key"
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                assert row is not None
                return int(row[0])

            await until(waiting, "the completion waits on the closure key")
        assert not completing.done(), "the completion should wait on the closure key"
        conn.commit()
        acks = await asyncio.wait_for(completing, timeout=10)
    assert acks == [Ack.STALE, Ack.APPLIED]
    assert await engine.complete([other.lease]) == [Ack.STALE]


async def test_attempts_are_found_by_job_id_without_their_receipt(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """An engine that did not take the claim (no remembered receipt) heartbeats and
    completes it through the job's ready row; a later attempt of the same job is told
    apart from the earlier one by its run lease."""
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
    (first,) = await engine.claim(QUEUE, limit=1)
    other = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff()
    )
    try:
        assert await other.heartbeat([first.lease]) == [Ack.APPLIED]
        assert await other.retry(first.lease, error="again", delay=timedelta(0)) == Ack.APPLIED
        await other.promote_due()
        (second,) = await engine.claim(QUEUE, limit=1)
        assert second.lease.lease == first.lease.lease + 1
        assert await other.complete([first.lease]) == [Ack.STALE]
        assert await other.heartbeat([second.lease]) == [Ack.APPLIED]
        assert await other.complete([second.lease]) == [Ack.APPLIED]
        assert await other.complete([second.lease]) == [Ack.STALE]
    finally:
        await other.close()
