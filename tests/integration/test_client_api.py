"""The async client against real Postgres: enqueue, transactions, admin, DLQ, callbacks."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pydantic
import pytest

import awa
from awa import AsyncClient, JobState

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class SendEmail:
    to: str
    subject: str = "hi"


class ResizeImage(pydantic.BaseModel):
    path: str
    width: int


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


async def test_insert_arg_styles_and_job_properties(client: AsyncClient) -> None:
    job = await client.insert(SendEmail("a@b"), tags=["x"], metadata={"m": 1})
    assert (job.kind, job.queue, job.state, job.priority, job.attempt) == (
        "send_email",
        "default",
        JobState.Available,
        2,
        0,
    )
    assert job.max_attempts == 25 and job.tags == ["x"] and job.metadata == {"m": 1}
    # As awa-pg: the job insert() returns carries the stored JSON object as args, as
    # get_job() reads it back.
    assert job.args == {"to": "a@b", "subject": "hi"} == job.record.args
    assert (await client.get_job(job.id)).args == {"to": "a@b", "subject": "hi"}
    assert job.errors == [] and job.progress is None and job.finalized_at is None
    assert datetime.fromisoformat(job.created_at).tzinfo is not None
    assert job.deadline is None and not job.is_cancelled()
    assert str(job.state) == "available" and job.state == 1
    model = await client.insert(ResizeImage(path="/a.png", width=3), queue="images")
    assert (model.kind, model.record.args, model.queue) == (
        "resize_image",
        {"path": "/a.png", "width": 3},
        "images",
    )
    assert model.args == {"path": "/a.png", "width": 3}
    raw = await client.insert({"n": 1}, kind="raw_kind", priority=1)
    assert (raw.kind, raw.priority) == ("raw_kind", 1)
    fetched = await client.get_job(job.id)
    assert fetched.id == job.id and fetched.args == job.record.args
    assert repr(fetched).startswith(f"Job(id={job.id}, kind='send_email'")


async def test_run_at_makes_jobs_scheduled(client: AsyncClient) -> None:
    text = await client.insert({"a": 1}, kind="k", run_at="2030-01-01 10:00:00")
    assert text.state == JobState.Scheduled
    assert text.run_at == "2030-01-01T10:00:00+00:00"
    naive = await client.insert({"a": 1}, kind="k", run_at=datetime(2030, 1, 1))
    assert naive.run_at == "2030-01-01T00:00:00+00:00"
    aware = await client.insert({"a": 1}, kind="k", run_at="2030-01-01T01:00:00Z")
    assert datetime.fromisoformat(aware.run_at) == datetime(2030, 1, 1, 1, tzinfo=UTC)
    with pytest.raises(awa.ValidationError):
        await client.insert({"a": 1}, kind="k", run_at="garbage")


async def test_validation_errors_name_the_field(client: AsyncClient) -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        await client.insert(SendEmail("x"), foo=1)  # type: ignore[call-arg]
    for options, field in [
        ({"priority": 9}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"queue": ""}, "queue"),
        ({"tags": ["a\x00"]}, "tags"),
    ]:
        with pytest.raises(awa.ValidationError) as info:
            await client.insert(SendEmail("x"), **options)  # type: ignore[arg-type]
        assert info.value.field == field
    with pytest.raises(awa.ValidationError, match="dataclass, pydantic BaseModel, or dict"):
        await client.insert(5, kind="x")
    with pytest.raises(awa.ValidationError) as info:
        await client.insert({"s": "a\x00"}, kind="x")
    assert info.value.field == "args"
    assert await client.list_jobs() == []


async def test_unique_conflict_and_cancel_by_unique_key(client: AsyncClient) -> None:
    first = await client.insert(SendEmail("u"), unique_opts={"by_args": True})
    with pytest.raises(awa.UniqueConflict):
        await client.insert(SendEmail("u"), unique_opts={"by_args": True})
    other = await client.insert(SendEmail("v"), unique_opts={"by_args": True})
    cancelled = await client.cancel_by_unique_key("send_email", args=SendEmail("u"))
    assert cancelled is not None and cancelled.id == first.id
    assert cancelled.state == JobState.Cancelled
    assert await client.cancel_by_unique_key("send_email", args={"to": "none"}) is None
    assert (await client.get_job(other.id)).state == JobState.Available


async def test_bulk_copy_inserts(client: AsyncClient) -> None:
    jobs = await client.insert_many_copy(
        [SendEmail(str(i)) for i in range(5)],
        opts=[None, {"queue": "other"}, None, None, {"ordering_key": "k"}],
    )
    assert [j.args["to"] for j in jobs] == ["0", "1", "2", "3", "4"]
    assert jobs[1].queue == "other"
    with pytest.raises(awa.ValidationError):
        await client.insert_many_copy([SendEmail("a")], opts=[None, None])


async def test_enqueue_many_copy_needs_queue_storage(client: AsyncClient) -> None:
    # On canonical storage the fast path refuses and writes nothing.
    with pytest.raises(awa.ValidationError, match="requires an active queue_storage backend"):
        await client.enqueue_many_copy([SendEmail("d")])
    assert await client.list_jobs() == []
    await client.install_queue_storage()  # a fresh database: queue storage becomes active
    count = await client.enqueue_many_copy(
        [SendEmail("d"), SendEmail("d")], unique_opts={"by_args": True}
    )
    assert count == 1


async def test_transaction_commit_rollback_and_raw_sql(client: AsyncClient) -> None:
    async with await client.transaction() as tx:
        assert await tx.execute("CREATE TABLE orders (id int, name text)") == 0
        assert await tx.execute("INSERT INTO orders VALUES ($1, $2), ($3, $4)", 1, "a", 2, "b") == 2
        assert await tx.fetch_one("SELECT * FROM orders WHERE id = $1", 1) == {"id": 1, "name": "a"}
        assert await tx.fetch_optional("SELECT * FROM orders WHERE id = $1", 9) is None
        rows = await tx.fetch_all("SELECT id, now() AS ts FROM orders ORDER BY id")
        assert [r["id"] for r in rows] == [1, 2] and isinstance(rows[0]["ts"], str)
        with pytest.raises(awa.DatabaseError):
            await tx.fetch_one("SELECT * FROM orders WHERE id = $1", 9)
        committed = await tx.insert(SendEmail("tx"))
        many = await tx.insert_many([SendEmail("m1"), SendEmail("m2")])
    with pytest.raises(awa.AwaError, match="already committed or rolled back"):
        await tx.execute("SELECT 1")
    assert (await client.get_job(committed.id)).args == {"to": "tx", "subject": "hi"}
    assert len(many) == 2

    with pytest.raises(RuntimeError):
        async with await client.transaction() as tx:
            await tx.execute("INSERT INTO orders VALUES ($1, $2)", 3, "c")
            gone = await tx.insert(SendEmail("gone"))
            raise RuntimeError("boom")
    with pytest.raises(awa.AwaError, match="job not found"):
        await client.get_job(gone.id)
    tx = await client.transaction()
    assert await tx.fetch_one("SELECT count(*) AS n FROM orders") == {"n": 2}
    await tx.execute("DELETE FROM orders")
    await tx.rollback()
    tx = await client.transaction()
    assert await tx.fetch_one("SELECT count(*) AS n FROM orders") == {"n": 2}
    await tx.commit()


async def test_job_admin(client: AsyncClient) -> None:
    job = await client.insert(SendEmail("a"))
    with pytest.raises(awa.AwaError, match=f"job not found: {job.id}"):
        await client.retry(job.id)
    with pytest.raises(awa.JobNotFound, match="job not found: 999999") as missing:
        await client.get_job(999999)
    # Code written against AwaError keeps catching it.
    assert isinstance(missing.value, awa.AwaError) and missing.value.job_id == 999999
    cancelled = await client.cancel(job.id)
    assert cancelled is not None and cancelled.state == JobState.Cancelled
    with pytest.raises(awa.AwaError):
        await client.cancel(job.id)
    retried = await client.retry(job.id)
    assert retried is not None and retried.state == JobState.Available
    assert [j.id for j in await client.list_jobs(state="available")] == [job.id]
    assert await client.list_jobs(kind="nope") == []
    with pytest.raises(ValueError, match="unknown job state: bogus"):
        await client.list_jobs(state="bogus")
    with pytest.raises(ValueError, match="exactly one of kind or queue"):
        await client.retry_failed()
    result = await client.retry_failed(kind="send_email")
    assert (result.jobs, result.matched, result.pruned_failed_count) == ([], 0, None)
    assert await client.discard_failed("send_email") == 0
    dumped = json.loads(await client.dump_job(job.id))
    assert dumped["job"]["id"] == job.id and dumped["timeline"][0]["label"] == "Created"
    run = json.loads(await client.dump_run(job.id))
    assert run["job_id"] == job.id and run["selected_attempt"] == 0


async def test_queue_controls_and_stats(client: AsyncClient) -> None:
    await client.insert(SendEmail("a"), queue="q1")
    await client.insert(SendEmail("b"), queue="q1", run_at="2030-01-01T00:00:00Z")
    await client.pause_queue("q1", paused_by="ops")
    await client.flush_admin_metadata()
    (stat,) = [s for s in await client.queue_stats() if s.queue == "q1"]
    assert (stat.total_queued, stat.available, stat.scheduled, stat.paused) == (2, 1, 1, True)
    assert stat.running == 0 and stat.failed == 0 and stat.waiting_external == 0
    assert stat.lag_seconds is not None and stat.completed_last_hour == 0
    await client.resume_queue("q1")
    assert not next(s for s in await client.queue_stats() if s.queue == "q1").paused
    assert await client.drain_queue("q1") == 2
    health = await client.health_check()
    assert health.postgres_connected and not health.healthy and health.queues == {}


async def test_dlq_guards_and_empty_reads(client: AsyncClient) -> None:
    assert await client.list_dlq() == []
    assert await client.dlq_depth() == 0
    assert await client.dlq_depth_by_queue() == []
    assert await client.get_dlq_job(1) is None
    assert await client.retry_from_dlq(1) is None
    assert await client.purge_dlq_job(1) is False
    job = await client.insert(SendEmail("x"))
    assert await client.move_failed_to_dlq(job.id, "manual") is None
    for call in (
        client.bulk_retry_from_dlq(),
        client.purge_dlq(),
        client.bulk_move_failed_to_dlq(),
    ):
        with pytest.raises(awa.ValidationError, match="allow_all"):
            await call
    assert await client.purge_dlq(allow_all=True) == 0


async def test_unknown_callbacks(client: AsyncClient) -> None:
    zero = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(zero)
    with pytest.raises(awa.ValidationError):
        await client.complete_external("not-a-uuid")
    with pytest.raises(awa.CallbackNotFound):
        await client.resolve_callback(zero)
    with pytest.raises(awa.CallbackNotFound):
        await client.heartbeat_callback(zero)
    with pytest.raises(ValueError, match="default_action"):
        await client.resolve_callback(zero, default_action="explode")


async def test_install_queue_storage_reset_and_close(migrated_database_url: str) -> None:
    client = AsyncClient(migrated_database_url)
    await client.insert(SendEmail("x"))
    await client.install_queue_storage(reset=True)
    assert await client.list_jobs() == []
    await client.close()
    with pytest.raises(awa.DatabaseError):
        await client.get_job(1)
    await client.close()


async def test_an_unreachable_url_fails_at_the_first_database_call() -> None:
    # Construction opens no connection: importing an app module needs no database.
    client = AsyncClient("postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(awa.DatabaseError, match="could not connect to the database"):
        await client.insert(SendEmail("x"))
    with pytest.raises(awa.DatabaseError, match="database connection failed"):
        await client.migrate()
    blocking = awa.Client("postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(awa.DatabaseError, match="could not connect to the database"):
        blocking.list_jobs()
    blocking.close()


def test_a_malformed_url_fails_at_construction() -> None:
    with pytest.raises(awa.DatabaseError, match="could not be parsed"):
        AsyncClient("postgresql://postgres@127.0.0.1/db?nonsense=1")
