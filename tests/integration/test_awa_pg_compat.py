"""awa-pg 0.6.9 programs that reach past the documented API keep working."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

import awa
from awa import AsyncClient, Job
from awa.domain.job import JobSpec
from awa.entrypoints.cli import cli
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Ping:
    n: int


async def test_async_client_raw_is_the_same_client_as_a_raw_client(
    migrated_database_url: str,
) -> None:
    client = AsyncClient(migrated_database_url)
    seen: list[int] = []
    done = asyncio.Event()

    @client.task(Ping, queue="raw")
    async def ping(job: Job[Ping]) -> None:
        seen.append(job.args.n)
        done.set()

    raw = client._raw
    assert isinstance(raw, awa.RawClient)
    assert client._raw is raw
    inserted = await raw.insert(Ping(1), queue="raw")
    # The blocking twin, from a plain thread, sees the same database.
    fetched = await asyncio.to_thread(raw.get_job_sync, inserted.id)
    assert fetched.id == inserted.id
    # The handlers registered on the client are the raw view's too: one runtime.
    await raw.start([("raw", 1)])
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await client.shutdown()
    assert seen == [1]
    await client.close()
    with pytest.raises(awa.DatabaseError):
        await raw.get_job(inserted.id)


async def test_retry_of_a_completed_job_is_refused_as_awa_pg_does(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        job = await client.insert(Ping(1), queue="done")
        engine = await client.admin_engine()
        (claim,) = await engine.claim("done", limit=1)
        await engine.complete([claim.lease])
        with pytest.raises(awa.AwaError, match=f"job not found: {job.id}"):
            await client.retry(job.id)
        assert str((await client.get_job(job.id)).state) == "completed"


async def test_retry_of_a_scheduled_or_retryable_job_is_refused_as_awa_pg_does(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        later = datetime.now(UTC) + timedelta(hours=1)
        scheduled = await client.insert(Ping(1), queue="deferred", run_at=later)
        with pytest.raises(awa.AwaError, match=f"job not found: {scheduled.id}"):
            await client.retry(scheduled.id)
        engine = await client.admin_engine()
        retrying = await client.insert(Ping(2), queue="retrying")
        (claim,) = await engine.claim("retrying", limit=1)
        await engine.retry(claim.lease, error="once more", delay=timedelta(hours=1))
        before = await client.get_job(retrying.id)
        assert str(before.state) == "retryable"
        with pytest.raises(awa.AwaError, match=f"job not found: {retrying.id}"):
            await client.retry(retrying.id)
        # Both are left as they were: still waiting for their time.
        assert str((await client.get_job(scheduled.id)).state) == "scheduled"
        after = await client.get_job(retrying.id)
        assert (str(after.state), after.run_at) == ("retryable", before.run_at)


async def test_a_dead_lettered_job_reads_as_failed_and_points_at_dlq_retry(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = AsyncClient(migrated_database_url)
    attempts = asyncio.Event()

    @client.task(Ping, queue="dead")
    async def boom(job: Job[Ping]) -> None:
        attempts.set()
        raise ValueError("boom")

    engine = await client.admin_engine()
    await engine.set_queue_dlq("dead", enabled=True)
    job = await client.insert(Ping(1), queue="dead", max_attempts=1)
    caplog.set_level(logging.WARNING, logger="awa.job")
    await client.start([("dead", 1)], poll_interval_ms=50)
    try:
        await asyncio.wait_for(attempts.wait(), 10)
        await until(lambda: client.get_dlq_job(job.id), "the job in the DLQ")
    finally:
        await client.shutdown()
    try:
        # awa-pg returns the dead-lettered job as it failed.
        found = await client.get_job(job.id)
        assert (found.id, str(found.state), found.attempt) == (job.id, "failed", 1)
        with pytest.raises(awa.AwaError, match=f"job not found: {job.id}") as refused:
            await client.retry(job.id)
        assert f"awa dlq retry {job.id}" in str(refused.value)
        moved = [r for r in caplog.records if "dead-letter queue (reason" in r.getMessage()]
        assert [r.levelno for r in moved] == [logging.WARNING]
        assert f"`awa dlq retry {job.id}`" in moved[0].getMessage()
        exhausted = [r for r in caplog.records if "failed on its last attempt" in r.getMessage()]
        assert exhausted and "`awa dlq retry`" in exhausted[0].getMessage()
        assert await client.retry_from_dlq(job.id) is not None
    finally:
        await client.close()


async def test_list_jobs_lists_a_dead_lettered_job_as_failed_as_awa_pg_does(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        engine = await client.admin_engine()
        dead = await client.insert(Ping(1), queue="dead")
        (claim,) = await engine.claim("dead", limit=1)
        await engine.fail(claim.lease, error="boom")
        assert await client.move_failed_to_dlq(dead.id, "manual") is not None
        newer = await client.insert(Ping(2), queue="dead")
        other = await client.insert(Ping(3), queue="elsewhere")

        def seen(jobs: list[Job[Any]]) -> list[tuple[int, str]]:
            return [(job.id, str(job.state)) for job in jobs]

        assert seen(await client.list_jobs()) == [
            (other.id, "available"),
            (newer.id, "available"),
            (dead.id, "failed"),
        ]
        assert seen(await client.list_jobs(state="failed")) == [(dead.id, "failed")]
        assert seen(await client.list_jobs(queue="dead", limit=1)) == [(newer.id, "available")]
        assert seen(await client.list_jobs(kind="ping", queue="dead")) == [
            (newer.id, "available"),
            (dead.id, "failed"),
        ]
        assert seen(await client.list_jobs(state="available", queue="dead", limit=5)) == [
            (newer.id, "available")
        ]
        assert await client.list_jobs(queue="elsewhere", state="failed") == []


async def test_pruned_failed_count_is_counted_per_queue_on_queue_storage(
    migrated_database_url: str,
) -> None:
    async with installed_engine(migrated_database_url, "qs_pruned") as engine:
        assert await engine.pruned_failed_count("gone") == 0
        await engine.enqueue_many([JobSpec(kind="k", queue="gone", max_attempts=1)])
        (claim,) = await engine.claim("gone", limit=1)
        assert await engine.fail(claim.lease, error="boom") == Ack.APPLIED
        for _ in range(20):
            if await engine.get_job(claim.job.id) is None:
                break
            # The ring turns only past a slot that holds rows: give each one a job.
            await engine.enqueue_many([JobSpec(kind="k", queue="filler")])
            (filler,) = await engine.claim("filler", limit=1)
            await engine.complete([filler.lease])
            await engine.rotate_queue_ring()
            await engine.prune_oldest(failed_retention=timedelta(0))
        assert await engine.get_job(claim.job.id) is None
        assert await engine.pruned_failed_count("gone") == 1
        assert await engine.pruned_failed_count("elsewhere") == 0


async def test_retry_failed_by_queue_reports_the_pruned_count_as_awa_pg_does(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        await client.install_queue_storage()
        assert (await client.retry_failed(queue="q")).pruned_failed_count == 0
        assert (await client.retry_failed(kind="k")).pruned_failed_count is None


async def test_start_takes_the_documented_completion_keywords(migrated_database_url: str) -> None:
    async with AsyncClient(migrated_database_url) as client:

        @client.task(Ping, queue="batched")
        async def ping(job: Job[Ping]) -> None:
            return None

        with pytest.raises(ValueError, match="completion_batch_size"):
            await client.start([("batched", 1)], completion_batch_size=0)
        await client.start([("batched", 1)], completion_batch_size=7, completion_flush_ms=5)
        try:
            runtime = client._runtime
            assert runtime is not None
            assert runtime.config.completion_batch_size == 7
            assert runtime.config.completion_flush_interval == pytest.approx(0.005)
        finally:
            await client.shutdown()


def _counters(url: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT queue, state::text, sum(n) FROM awa.queue_counts "
            "GROUP BY 1, 2 HAVING sum(n) <> 0"
        ).fetchall()
    return {(q, s): int(n) for q, s, n in rows}


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


async def test_storage_rebuild_terminal_counters_recounts_from_the_jobs(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url
    canonical = await asyncio.to_thread(_cli, url, "storage", "rebuild-terminal-counters")
    assert canonical.exit_code == 0, canonical.stderr
    assert "canonical storage keeps no counters" in canonical.stdout
    async with AsyncClient(url) as client:
        await client.install_queue_storage()
        for n in range(3):
            await client.insert(Ping(n), queue="counted")
        engine = await client.admin_engine()
        (claim,) = await engine.claim("counted", limit=1)
        await engine.complete([claim.lease])
    truth = {("counted", "available"): 2, ("counted", "completed"): 1}
    assert _counters(url) == truth
    with psycopg.connect(url, autocommit=True) as conn:  # drift: counters gone wrong
        conn.execute("UPDATE awa.queue_counts SET n = n + 5")
        conn.execute(
            "INSERT INTO awa.queue_counts VALUES ('ghost', 'failed', 3, 7) ON CONFLICT DO NOTHING"
        )
    assert _counters(url) != truth
    rebuilt = await asyncio.to_thread(_cli, url, "storage", "rebuild-terminal-counters")
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert rebuilt.stdout.strip() == "Rebuilt 2 counter(s) in schema awa"
    assert _counters(url) == truth
