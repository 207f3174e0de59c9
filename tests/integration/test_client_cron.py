"""Periodic jobs through the public client: declaration, storage, firing, administration."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import awa
from awa import AsyncClient, Client, Job, ValidationError
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Beat:
    n: int = 0


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"cron_expr": "not a cron"}, "invalid cron expression"),
        ({"cron_expr": "0 0 0 * * * *"}, "five or six fields"),
        ({"timezone": "Not/A/Zone"}, "invalid timezone"),
        ({"priority": 5}, "must be between 1 and 4, got 5"),
        ({"max_attempts": 0}, "must be between 1 and 1000, got 0"),
        ({"missed_fire_policy": "skip"}, "invalid cron missed fire policy 'skip'"),
    ],
)
async def test_periodic_is_validated_at_the_call(
    client: AsyncClient, kwargs: dict[str, Any], words: str
) -> None:
    arguments: dict[str, Any] = {"cron_expr": "* * * * *", **kwargs}
    expr = arguments.pop("cron_expr")
    with pytest.raises(ValidationError, match=words):
        client.periodic("bad", expr, Beat, Beat(), **arguments)
    with pytest.raises(TypeError, match="args_type must be a class"):
        client.periodic("bad", "* * * * *", 5, Beat())  # type: ignore[arg-type]


async def test_a_schedule_is_stored_at_start_and_fires_every_second(
    client: AsyncClient, migrated_database_url: str
) -> None:
    done: list[Job[Beat]] = []

    @client.task(Beat, queue="beats")
    async def beat(job: Job[Beat]) -> None:
        done.append(job)

    client.periodic(
        "beat",
        "* * * * * *",
        Beat,
        Beat(7),
        queue="beats",
        tags=["cron"],
        metadata={"source": "test"},
        timezone="Europe/Paris",
    )
    # The last declaration of a name wins.
    client.periodic("beat", "* * * * * *", Beat, Beat(8), queue="beats", tags=["cron"])
    await client.start([("beats", 2)], leader_election_interval_ms=100)
    try:
        (row,) = await client.list_cron_jobs()
        assert row["name"] == "beat" and row["cron_expr"] == "* * * * * *"
        assert (row["kind"], row["queue"], row["args"], row["tags"]) == (
            "beat",
            "beats",
            {"n": 8},
            ["cron"],
        )
        assert row["missed_fire_policy"] == "coalesce" and row["paused_at"] is None
        assert row["created_at"].endswith("Z")

        async def three() -> bool:
            return len(done) >= 3

        await until(three, "three beats fired")
    finally:
        await client.shutdown()
    fire_times = [job.metadata["cron_fire_time"] for job in done]
    assert len(set(fire_times)) == len(fire_times)
    assert all(job.metadata["cron_name"] == "beat" and job.args == Beat(8) for job in done)
    assert all(job.tags == ["cron"] for job in done)
    (row,) = await client.list_cron_jobs()
    assert row["last_enqueued_at"] is not None
    # Removing the schedule from code (a runtime that no longer declares it) keeps the row.
    async with AsyncClient(migrated_database_url) as second:

        @second.task(Beat, queue="beats")
        async def beat2(job: Job[Beat]) -> None:
            return None

        await second.start([("beats", 1)])
        await second.shutdown()
        assert [r["name"] for r in await second.list_cron_jobs()] == ["beat"]


async def test_pause_trigger_resume_and_delete(client: AsyncClient) -> None:
    @client.task(Beat, queue="paused_beats")
    async def beat(job: Job[Beat]) -> None:
        return None

    client.periodic("nightly", "0 3 * * *", Beat, Beat(), queue="paused_beats")
    await client.start([("paused_beats", 1)])
    await client.shutdown()
    assert await client.pause_cron_job("nightly", paused_by="ops")
    (row,) = await client.list_cron_jobs()
    assert row["paused_by"] == "ops" and row["paused_at"] is not None
    job = await client.trigger_cron_job("nightly")
    assert job.metadata == {"cron_name": "nightly", "triggered_manually": True}
    assert await client.resume_cron_job("nightly")
    assert (await client.list_cron_jobs())[0]["paused_at"] is None
    with pytest.raises(ValidationError, match="cron job not found: missing"):
        await client.trigger_cron_job("missing")
    assert not await client.pause_cron_job("missing")
    assert await client.delete_cron_job("nightly") is True
    assert await client.delete_cron_job("nightly") is False


def test_the_sync_client_lists_and_deletes(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        # A row written by hand, as operators or other deployments may.
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, kind, queue) "
            "VALUES ('by_hand', '*/5 * * * *', 'beat', 'beats')"
        )
    with Client(migrated_database_url) as client:
        rows = client.list_cron_jobs()
        assert [r["name"] for r in rows] == ["by_hand"]
        assert rows[0]["timezone"] == "UTC" and rows[0]["last_enqueued_at"] is None
        assert client.trigger_cron_job("by_hand").kind == "beat"
        assert client.pause_cron_job("by_hand") and client.resume_cron_job("by_hand")
        assert client.delete_cron_job("by_hand") is True
        assert client.delete_cron_job("by_hand") is False
        assert client.list_cron_jobs() == []
    assert awa.Client is Client


async def test_a_row_written_by_hand_fires_under_any_runtime(
    client: AsyncClient, migrated_database_url: str
) -> None:
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, kind, queue, args)"
            " VALUES ('by_hand', '* * * * * *', 'beat', 'hand', '{\"n\": 3}')"
        )
    done: list[Job[Beat]] = []

    @client.task(Beat, queue="hand")
    async def beat(job: Job[Beat]) -> None:
        done.append(job)

    await client.start([("hand", 1)], leader_election_interval_ms=100)
    try:

        async def fired() -> bool:
            return bool(done)

        await until(fired, "the schedule fired")
    finally:
        await client.shutdown()
    assert done[0].args == Beat(3) and done[0].metadata["cron_name"] == "by_hand"
