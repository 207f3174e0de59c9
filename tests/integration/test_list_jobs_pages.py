"""``list_jobs`` pages newest first with a ``before_id`` cursor on both Postgres engines:
paging with every filter returns exactly the matching jobs, in descending id order, each
once, whatever storage the jobs' facts live in (queue storage: ready rows, claims and
closures, deferred rows, done rows, a retried job's second ready row)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from awa import AsyncClient
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.ports.storage import JobFilter, StorageEngine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(120)]


@dataclasses.dataclass
class Alpha:
    n: int


@dataclasses.dataclass
class Beta:
    n: int


@pytest.fixture(params=["canonical", "queue_storage"])
async def client(
    request: pytest.FixtureRequest, migrated_database_url: str
) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        if request.param == "queue_storage":
            await c.install_queue_storage()
        yield c


async def _history(client: AsyncClient) -> StorageEngine:
    """Jobs in every state, some with several facts, in two queues and two kinds."""
    engine = await client.admin_engine()
    later = datetime.now(UTC) + timedelta(hours=1)
    for n in range(6):
        await client.insert(Alpha(n), queue="one", tags=["even"] if n % 2 == 0 else None)
        await client.insert(Beta(n), queue="two")
    await client.insert(Alpha(99), queue="one", run_at=later)  # scheduled
    claims = await engine.claim("one", limit=4)
    await engine.complete([claims[0].lease])
    await engine.fail(claims[1].lease, error="broken")
    await engine.retry(claims[2].lease, error="again", delay=timedelta(0))  # retryable
    # claims[3] stays running
    done = (await engine.claim("two", limit=2))[0]
    await engine.fail(done.lease, error="broken")
    await client.retry(done.job.id)  # failed, then available again: a second ready fact
    beta = [j for j in await client.list_jobs(queue="two", state="available")]
    await engine.cancel_job(beta[-1].id)
    await client.insert(Beta(100), queue="two")
    return engine


async def _pages(engine: StorageEngine, job_filter: JobFilter, size: int) -> list[JobRecord]:
    found: list[JobRecord] = []
    cursor: int | None = None
    while True:
        page = await engine.list_jobs(
            JobFilter(
                kind=job_filter.kind,
                queue=job_filter.queue,
                state=job_filter.state,
                tag=job_filter.tag,
                before_id=cursor,
            ),
            limit=size,
        )
        assert len(page) <= size
        if not page:
            return found
        found.extend(page)
        cursor = page[-1].id


def _matches(job: JobRecord, job_filter: JobFilter) -> bool:
    return (
        (job_filter.kind is None or job.kind == job_filter.kind)
        and (job_filter.queue is None or job.queue == job_filter.queue)
        and (job_filter.state is None or job.state == job_filter.state)
        and (job_filter.tag is None or job_filter.tag in job.tags)
    )


async def test_newest_pages_follow_the_cursor_under_every_filter(client: AsyncClient) -> None:
    engine = await _history(client)
    every = await _pages(engine, JobFilter(), 1000)
    ids = [j.id for j in every]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids) == 14
    truth = {j.id: await engine.get_job(j.id) for j in every}
    assert all(truth[j.id] == j for j in every)  # each row is the job's current state
    states = {j.state for j in every}
    assert {
        JobState.Available,
        JobState.Running,
        JobState.Completed,
        JobState.Failed,
        JobState.Retryable,
        JobState.Scheduled,
        JobState.Cancelled,
    } <= states
    filters = [
        JobFilter(),
        JobFilter(queue="one"),
        JobFilter(queue="two"),
        JobFilter(kind="alpha"),
        JobFilter(kind="beta", queue="two"),
        JobFilter(tag="even"),
        JobFilter(queue="nowhere"),
        *(JobFilter(state=state) for state in states),
        JobFilter(state=JobState.Available, queue="two"),
    ]
    for job_filter in filters:
        expected = [j.id for j in every if _matches(j, job_filter)]
        for size in (1, 3, 50):
            got = [j.id for j in await _pages(engine, job_filter, size)]
            assert got == expected, (job_filter, size)
    # The first page is the newest one.
    newest = await engine.list_jobs(JobFilter(), limit=3)
    assert [j.id for j in newest] == ids[:3]
