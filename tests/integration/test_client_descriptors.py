"""Descriptors through the public client: declaration, catalog sync, hashes, stale, drift,
and the leader's retention cleanup (which runs as soon as a runtime leads)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import psycopg
import pytest

from awa import AsyncClient, AwaError, DatabaseError, Job
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

EMAIL_HASH = "0c426749d14350a987906cacf9ff383c28fddb15e439ff9e5399ea4c365ee3a8"


@dataclasses.dataclass
class Tick:
    n: int = 0


def _client(url: str) -> AsyncClient:
    client = AsyncClient(url)

    @client.task(Tick, queue="email")
    async def tick(job: Job[Tick]) -> None:
        return None

    return client


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with _client(migrated_database_url) as c:
        yield c


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql.encode()).fetchall())


async def test_declared_descriptors_are_synced_with_hashes(
    client: AsyncClient, migrated_database_url: str
) -> None:
    url = migrated_database_url
    client.queue_descriptor("email", display_name="Email")
    client.queue_descriptor("email", display_name="Email2")  # the last declaration wins
    client.job_kind_descriptor("tick", display_name="Tick", description="ticks", tags=["core"])
    await client.start([("email", 1)])
    try:
        (queue,) = await client.list_queue_descriptors()
        assert queue["queue"] == "email" and queue["display_name"] == "Email2"
        assert queue["descriptor_hash"] == EMAIL_HASH
        assert queue["stale"] is False and queue["drift"] is False
        (kind,) = await client.list_job_kind_descriptors()
        assert kind["kind"] == "tick" and kind["tags"] == ["core"]
        ((queue_hashes, kind_hashes),) = _rows(
            url,
            "SELECT queue_descriptor_hashes, job_kind_descriptor_hashes FROM awa.runtime_instances",
        )
        assert queue_hashes == {"email": EMAIL_HASH}
        assert kind_hashes == {"tick": kind["descriptor_hash"]}
    finally:
        await client.shutdown()


async def test_declaring_after_start_is_refused_and_allowed_again_after_shutdown(
    client: AsyncClient,
) -> None:
    """As in awa-pg: the runtime read the declarations at start(); a later one would be
    silently lost, so it raises."""
    await client.start([("email", 1)])
    try:
        with pytest.raises(AwaError, match=r"queue_descriptor\(\) must be called before start"):
            client.queue_descriptor("email", display_name="late")
        with pytest.raises(AwaError, match=r"job_kind_descriptor\(\) must be called before start"):
            client.job_kind_descriptor("tick", display_name="late")
        # The served queue is catalogued with an empty descriptor; the late one is not.
        listed = await client.list_queue_descriptors()
        assert [(d["queue"], d["display_name"]) for d in listed] == [("email", None)]
    finally:
        await client.shutdown()
    client.queue_descriptor("email", display_name="next run")


async def test_two_live_runtimes_that_disagree_show_drift_and_an_unrefreshed_one_is_stale(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url
    async with _client(url) as first, _client(url) as second:
        first.queue_descriptor("email", description="v1")
        second.queue_descriptor("email", description="v2")
        await first.start([("email", 1)])
        await second.start([("email", 1)])
        try:
            (row,) = await first.list_queue_descriptors()
            assert row["drift"] is True and row["stale"] is False
        finally:
            await second.shutdown()
        (row,) = await first.list_queue_descriptors()
        assert row["drift"] is False
        await first.shutdown()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE awa.queue_descriptors SET last_seen_at = now() - interval '1 minute'"
            )
        (row,) = await first.list_queue_descriptors()
        assert row["stale"] is True


async def test_bad_descriptors_are_refused_at_start_and_nothing_is_written(
    client: AsyncClient, migrated_database_url: str
) -> None:
    client.queue_descriptor("unconfigured")
    with pytest.raises(
        AwaError, match="queue descriptor declared for unknown queue 'unconfigured'"
    ):
        await client.start([("email", 1)])
    async with _client(migrated_database_url) as other:
        other.queue_descriptor("email", description="x" * 2001)
        with pytest.raises(DatabaseError, match='"queue_descriptors_description_len"'):
            await other.start([("email", 1)])
        with pytest.raises(TypeError, match="display_name must be a string"):
            other.job_kind_descriptor("tick", display_name=5)  # type: ignore[arg-type]
    assert _rows(migrated_database_url, "SELECT * FROM awa.queue_descriptors") == []


async def test_the_leader_deletes_descriptors_unseen_for_the_retention(
    client: AsyncClient, migrated_database_url: str
) -> None:
    url = migrated_database_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.queue_descriptors (queue, descriptor_hash, last_seen_at)"
            " VALUES ('retired', 'h', now() - interval '3 days'),"
            " ('recent', 'h', now() - interval '1 hour')"
        )
    await client.start(
        [("email", 1)],
        descriptor_retention_days=2,
        leader_election_interval_ms=50,
    )
    try:

        async def pruned() -> list[str] | None:
            names = [r["queue"] for r in await client.list_queue_descriptors()]
            return None if "retired" in names else names

        names = await until(pruned, "the retired queue's descriptor pruned")
    finally:
        await client.shutdown()
    assert names == ["email", "recent"]  # the served queue's own (empty) descriptor stays
