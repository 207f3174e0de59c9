"""The blocking ``Client``: same method names as ``AsyncClient``, no worker methods."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

import awa
from awa import Client, JobState

pytestmark = pytest.mark.postgres


@dataclasses.dataclass
class Report:
    name: str


def test_sync_client_round_trip(migrated_database_url: str) -> None:
    with Client(migrated_database_url) as client:
        client.migrate()
        job = client.insert(Report("q3"), tags=["finance"])
        assert job.state == JobState.Available and job.args == {"name": "q3"}
        assert job.record.args == {"name": "q3"}
        assert client.get_job(job.id).id == job.id
        assert [j.id for j in client.list_jobs(kind="report")] == [job.id]
        assert len(client.insert_many_copy([Report("a"), Report("b")])) == 2
        with pytest.raises(awa.ValidationError, match="requires an active queue_storage"):
            client.enqueue_many_copy([Report("c")])
        with client.transaction() as tx:
            assert tx.fetch_one("SELECT $1::int AS v", 7) == {"v": 7}
            inside = tx.insert(Report("tx"))
        assert client.get_job(inside.id).args == {"name": "tx"}
        with pytest.raises(RuntimeError), client.transaction() as tx:
            gone = tx.insert(Report("gone"))
            raise RuntimeError("roll back")
        with pytest.raises(awa.AwaError, match="job not found"):
            client.get_job(gone.id)
        client.pause_queue("default", "me")
        assert next(s for s in client.queue_stats() if s.queue == "default").paused
        client.resume_queue("default")
        cancelled = client.cancel(job.id)
        assert cancelled is not None and cancelled.state == JobState.Cancelled
        assert client.drain_queue("default") == 3
        assert client.dlq_depth() == 0 and client.list_dlq() == []
        with pytest.raises(awa.CallbackNotFound):
            client.complete_external("00000000-0000-0000-0000-000000000000")
        assert client.health_check().postgres_connected
        for name in ("task", "worker", "start", "shutdown", "periodic"):
            assert not hasattr(client, name)
    with pytest.raises(awa.DatabaseError):
        client.get_job(job.id)
    client.close()


@pytest.mark.anyio
async def test_raw_client_offers_async_and_blocking_forms(migrated_database_url: str) -> None:
    raw = awa.RawClient(migrated_database_url)
    try:
        job = await raw.insert({"n": 1}, kind="raw_job")
        # The blocking twin runs on its own loop thread, so call it off this loop.
        seen = await asyncio.to_thread(raw.get_job_sync, job.id)
        assert seen.id == job.id and seen.kind == "raw_job"
        inserted = await asyncio.to_thread(raw.insert_sync, {"n": 2}, kind="raw_job")
        assert (await raw.get_job(inserted.id)).args == {"n": 2}
    finally:
        await raw.close()
