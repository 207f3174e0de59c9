"""Queue names may have 200 characters; their wake-up channel is cut to Postgres's 63-byte
limit the same way in SQL and in Python, so inserting into such a queue works and wakes
its workers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from awa import AsyncClient, Job, JobState
from awa.domain.channels import queue_channel
from tests.support.waits import job_in_state, until

pytestmark = [pytest.mark.postgres]

LONG = "é" * 199 + "z"  # 200 characters, 399 bytes


@dataclasses.dataclass
class Tick:
    n: int


def test_sql_and_python_cut_the_channel_alike(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url) as conn:

        @settings(max_examples=200, deadline=None)
        @given(
            st.text(
                st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
                max_size=200,
            )
        )
        def same(queue: str) -> None:
            row = conn.execute("SELECT awa.wake_channel(%s)", (queue,)).fetchone()
            assert row is not None
            assert row[0] == queue_channel(queue)
            assert len(row[0].encode()) <= 63

        same()


def test_sql_insert_into_a_long_queue(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT id, queue FROM awa.insert_job_compat('tick', %s)", (LONG,)
        ).fetchone()
    assert row is not None and row[1] == LONG


def test_an_edit_through_the_jobs_view_wakes_a_long_queue(migrated_database_url: str) -> None:
    """A queue-storage job made ready by an edit through awa.jobs wakes its queue on the
    queue's cut channel name (awa.queue_storage_edit)."""
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute("SELECT awa.storage_auto_finalize_if_fresh()")
        row = conn.execute(
            "SELECT id FROM awa.insert_job_compat('tick', %s, p_run_at => now() + interval '1h')",
            (LONG,),
        ).fetchone()
        assert row is not None
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(queue_channel(LONG))))
        conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (row[0],))
        state = conn.execute(
            "SELECT state::text, awa.job_plane(id) FROM awa.jobs WHERE id = %s", (row[0],)
        ).fetchone()
        assert state == ("available", "awa")
        assert [n.channel for n in conn.notifies(timeout=5, stop_after=1)] == [queue_channel(LONG)]


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


@pytest.mark.anyio
async def test_a_200_character_queue_is_woken_on_insert(client: AsyncClient) -> None:
    done = asyncio.Event()

    @client.task(Tick, queue=LONG)
    async def tick(job: Job[Tick]) -> None:
        done.set()

    # Polling every 30 s: only the wake-up can make the worker claim within the wait below.
    await client.start([(LONG, 1)], poll_interval_ms=30_000)
    try:
        # past the worker's first claim, which would find a job inserted before it
        runtime = client._runtime
        assert runtime is not None
        await until(lambda: runtime.dispatchers[0].claim_calls > 0, "the first claim")
        job = await client.insert(Tick(n=1), queue=LONG)
        await asyncio.wait_for(done.wait(), timeout=10)
        await job_in_state(client, job.id, JobState.Completed)
    finally:
        await client.shutdown(timeout_ms=2000)
