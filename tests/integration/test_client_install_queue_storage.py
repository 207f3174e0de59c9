"""``install_queue_storage`` / ``prepare_queue_storage_schema`` build the engine for real."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import awa
from awa import AsyncClient, AwaError

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(database_url) as c:
        yield c


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    return {name for (name,) in rows}


async def test_install_into_another_schema_and_rebuild_it(
    client: AsyncClient, database_url: str
) -> None:
    await client.install_queue_storage(schema="awa_side", queue_slot_count=4, lease_slot_count=2)
    tables = _tables(database_url, "awa_side")
    assert {"ready_entries", "claims", "deferred_jobs"} <= tables
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE awa_side.marker (x int)")
    # idempotent without reset: the marker survives
    await client.prepare_queue_storage_schema(schema="awa_side", queue_slot_count=4)
    assert "marker" in _tables(database_url, "awa_side")
    await client.install_queue_storage(schema="awa_side", queue_slot_count=4, reset=True)
    rebuilt = _tables(database_url, "awa_side")
    assert "marker" not in rebuilt and "ready_entries" in rebuilt


async def test_reset_of_the_default_schema_empties_it(client: AsyncClient) -> None:
    await client.migrate()
    job = await client.insert({"n": 1}, kind="keep_me")
    await client.pause_queue("default")
    await client.install_queue_storage(reset=True)
    with pytest.raises(awa.AwaError, match="job not found"):
        await client.get_job(job.id)
    assert await client.queue_stats() == []


async def test_bad_layouts_are_refused_before_anything_is_written(client: AsyncClient) -> None:
    # the one schema-name rule (awa.domain.validation.schema_name_problem)
    for schema in ("no; drop", "é", "1awa", "q" * 64):
        with pytest.raises(awa.ValidationError, match="schema") as info:
            await client.install_queue_storage(schema=schema)
        assert info.value.field == "schema"
        with pytest.raises(awa.ValidationError, match="schema"):
            await client.prepare_queue_storage_schema(schema=schema)
    with pytest.raises((ValueError, awa.ValidationError), match="queue_slot_count"):
        await client.install_queue_storage(schema="awa_x", queue_slot_count=0)


async def test_the_default_schema_keeps_its_ring_sizes(client: AsyncClient) -> None:
    with pytest.raises(awa.ValidationError, match="queue_slot_count") as info:
        await client.install_queue_storage(queue_slot_count=4)
    assert info.value.field == "queue_slot_count"
    with pytest.raises(awa.ValidationError, match="lease_slot_count"):
        await client.prepare_queue_storage_schema(schema="awa", lease_slot_count=2)
    # The defaults are accepted, and another schema takes any size.
    await client.install_queue_storage(queue_slot_count=16, lease_slot_count=8)
    await client.install_queue_storage(schema="awa_sized", queue_slot_count=4)


def _active_engine(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT active_engine FROM awa.storage_transition_state").fetchone()
    assert row is not None
    return str(row[0])


def _status(url: str) -> tuple[str, str, str | None]:
    """(state, active_engine, details.schema) of the storage transition."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT state, active_engine, details ->> 'schema' FROM awa.storage_transition_state"
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), row[2]


async def test_install_on_a_canonical_database_without_jobs_makes_queue_storage_active(
    migrated_database_url: str,
) -> None:
    # The template is migrated below the client, so it is canonical, as a database of an
    # earlier release is.
    assert _active_engine(migrated_database_url) == "canonical"
    async with AsyncClient(migrated_database_url) as client:
        await client.install_queue_storage()
        assert _active_engine(migrated_database_url) == "queue_storage"
        job = await client.insert({"n": 1}, kind="fresh")
        assert (await client.get_job(job.id)).kind == "fresh"
    with psycopg.connect(migrated_database_url) as conn:
        canonical = conn.execute("SELECT count(*) FROM awa.canonical_jobs").fetchone()
    assert canonical == (0,)


async def test_install_refuses_to_leave_live_canonical_jobs_behind(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        job = await client.insert({"n": 1}, kind="old")
        with pytest.raises(AwaError, match="canonical_backlog_drained") as info:
            await client.install_queue_storage(schema="awa_live")
        assert "awa storage prepare --engine queue_storage" in str(info.value)
        assert _status(migrated_database_url)[:2] == ("canonical", "canonical")
        assert "ready_entries" in _tables(migrated_database_url, "awa_live")  # installed
        assert (await client.get_job(job.id)).state is awa.JobState.Available


@pytest.mark.parametrize("migrated_first", [False, True])
async def test_install_into_a_named_schema_installs_and_activates_it(
    client: AsyncClient, database_url: str, migrated_first: bool
) -> None:
    if migrated_first:
        await client.migrate()  # a fresh database starts on queue storage in awa
        assert _status(database_url) == ("active", "queue_storage", "awa")
    await client.install_queue_storage(schema="x")
    assert _status(database_url) == ("active", "queue_storage", "x")
    assert await client.enqueue_many_copy([{"n": 1}, {"n": 2}], kind="copied") == 2
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM x.ready_entries").fetchone()
    assert row == (2,)
    await _drain_on(client, "x", expected=2)


async def test_install_into_a_named_schema_keeps_finished_canonical_history(
    migrated_database_url: str,
) -> None:
    async with AsyncClient(migrated_database_url) as client:
        old = await client.insert({"n": 0}, kind="history")
        await client.cancel(old.id)
        await client.install_queue_storage(schema="x_hist")
        assert _status(migrated_database_url) == ("active", "queue_storage", "x_hist")
        assert (await client.get_job(old.id)).state is awa.JobState.Cancelled
        assert await client.enqueue_many_copy([{"n": 1}], kind="copied") == 1
        await _drain_on(client, "x_hist", expected=1)


async def test_install_refuses_to_move_away_from_an_active_schema_that_holds_jobs(
    client: AsyncClient, database_url: str
) -> None:
    await client.migrate()
    await client.insert({"n": 1}, kind="stays")
    with pytest.raises(AwaError, match="no_queue_storage_rows"):
        await client.install_queue_storage(schema="elsewhere")
    assert _status(database_url) == ("active", "queue_storage", "awa")


async def _drain_on(client: AsyncClient, schema: str, *, expected: int) -> None:
    """Start a worker on ``schema`` and wait until it ran ``expected`` jobs."""
    ran: list[int] = []
    done = asyncio.Event()

    @client.task(dict, kind="copied")
    async def copied(job: awa.Job[Any]) -> None:
        ran.append(job.id)
        if len(ran) >= expected:
            done.set()

    await client.start([("default", 2)], queue_storage_schema=schema)
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await client.shutdown()
    assert len(ran) == len(set(ran)) == expected


async def test_install_is_refused_while_the_worker_runtime_runs(client: AsyncClient) -> None:
    await client.migrate()

    @client.task(dict, kind="noop")
    async def noop(job: Any) -> None:
        return None

    await client.start([("default", 1)])
    try:
        with pytest.raises(AwaError, match="while the worker runtime is running"):
            await client.install_queue_storage()
    finally:
        await client.shutdown()
    await client.install_queue_storage()  # fine again once it stopped


async def test_start_refuses_a_queue_storage_schema_it_would_not_use(client: AsyncClient) -> None:
    await client.migrate()

    @client.task(dict, kind="noop")
    async def noop(job: Any) -> None:
        return None

    with pytest.raises(ValueError, match="queue_storage_schema='side'") as info:
        await client.start([("default", 1)], queue_storage_schema="side")
    assert "prepare-queue-storage-schema" in str(info.value)
    with pytest.raises(awa.ValidationError, match="plain SQL identifier") as bad:
        await client.start([("default", 1)], queue_storage_schema="é")
    assert bad.value.field == "queue_storage_schema"
    assert (await client.health_check()).poll_loop_alive is False


@pytest.mark.anyio
async def test_the_first_worker_start_says_it_switched_a_fresh_database(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = AsyncClient(migrated_database_url)

    @client.task(dict, kind="switch_probe")
    async def probe(job: object) -> None:
        return None

    caplog.set_level(logging.INFO, logger="awa")
    try:
        await client.start([("default", 1)])
        await client.shutdown()
        switched = [r for r in caplog.records if "storage engine switched" in r.getMessage()]
        assert len(switched) == 1
        assert switched[0].name.startswith("awa.")
        caplog.clear()
        await client.start([("default", 1)])
        assert not [r for r in caplog.records if "storage engine switched" in r.getMessage()]
    finally:
        await client.close()
