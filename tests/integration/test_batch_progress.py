"""``client.get_batch`` (ADR 0035): a batch's progress read from the client, not only in
its callback, on the in-memory engine and on Postgres: the counts as its jobs end, the
callback's id and state, and a clear ``JobNotFound`` for an id of no batch."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

import awa
import awa.testing
from awa.domain import batches
from awa.domain.batches import BatchCounts
from awa.domain.states import JobState
from awa.entrypoints.args import build_spec

pytestmark = pytest.mark.anyio

PARTS = "progress_parts"
REPORTS = "progress_reports"


@attrs.frozen
class Part:
    n: int


@attrs.frozen
class Summary:
    name: str


@pytest.fixture(
    params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def client(request: pytest.FixtureRequest) -> AsyncIterator[awa.AsyncClient]:
    if request.param == "memory":
        made = awa.testing.memory_client()
    else:
        made = awa.AsyncClient(request.getfixturevalue("migrated_database_url"))
    try:
        yield made
    finally:
        await made.close()


async def test_get_batch_follows_the_batch_from_the_client(client: awa.AsyncClient) -> None:
    @client.task(Part, queue=PARTS)
    async def part(job: awa.Job[Part]) -> awa.Cancel | None:
        if job.args.n == 2:
            return awa.Cancel("not needed")
        if job.args.n == 3:
            raise RuntimeError("part 3 is broken")
        return None

    @client.task(Summary, queue=REPORTS)
    async def summary(job: awa.Job[Summary]) -> None:
        return None

    members = [await client.insert(Part(n), queue=PARTS, max_attempts=1) for n in (1, 2, 3, 4)]
    engine = await client.admin_engine()
    (callback,) = await engine.enqueue_many(
        [
            batches.callback_spec(
                build_spec(Summary("night"), queue=REPORTS), [m.id for m in members]
            )
        ]
    )

    assert await client.get_batch(callback.id) == BatchCounts(
        4, 0, 0, 0, callback_id=callback.id, callback_state=JobState.Scheduled
    )
    await awa.testing.work_next(client, PARTS)
    await awa.testing.work_next(client, PARTS)
    progress = await client.get_batch(callback.id)
    assert (progress.completed, progress.cancelled, progress.pending) == (1, 1, 2)
    assert (progress.callback_state, progress.finished) == (JobState.Scheduled, False)

    await awa.testing.drain(client, PARTS)
    assert await client.get_batch(callback.id) == BatchCounts(
        4, 2, 1, 1, callback_id=callback.id, callback_state=JobState.Available
    )
    (ran,) = await awa.testing.drain(client, REPORTS)
    assert ran.is_completed()
    done = await client.get_batch(callback.id)
    assert (done.as_dict(), done.callback_state, done.finished) == (
        {"size": 4, "completed": 2, "failed": 1, "cancelled": 1, "pending": 0},
        JobState.Completed,
        True,
    )
    # The batch is known after its callback's row is gone (reclaimed, or deleted).
    assert await engine.delete_jobs([callback.id]) == 1
    assert await client.get_batch(callback.id) == BatchCounts(
        4, 2, 1, 1, callback_id=callback.id, callback_state=None
    )


async def test_an_id_of_no_batch_is_refused_clearly(client: awa.AsyncClient) -> None:
    plain = await client.insert(Part(1), queue=PARTS)
    with pytest.raises(awa.JobNotFound, match=f"job not found: {plain.id}: no batch has this id"):
        await client.get_batch(plain.id)
    with pytest.raises(awa.JobNotFound, match="no batch has this id") as missing:
        await client.get_batch(987_654_321)
    assert missing.value.job_id == 987_654_321
    with pytest.raises(awa.ValidationError, match="job_id: must be an integer"):
        await client.get_batch("7")  # type: ignore[arg-type]


@pytest.mark.postgres
def test_the_blocking_client_reads_a_batch(migrated_database_url: str) -> None:
    with awa.Client(migrated_database_url) as client:
        batch = awa.Batch(Summary("sync"), queue=REPORTS)
        batch.add(Part(1), queue=PARTS)
        batch.add(Part(2), queue=PARTS)
        inserted = batch.insert_sync(client)
        progress = client.get_batch(inserted.id)
        assert progress == BatchCounts(
            2, 0, 0, 0, callback_id=inserted.id, callback_state=JobState.Scheduled
        )
        with pytest.raises(awa.JobNotFound):
            client.get_batch(inserted.jobs[0].id)
