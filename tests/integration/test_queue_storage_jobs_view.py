"""``awa.jobs`` over every plane: canonical rows and queue-storage jobs, with operator
UPDATE / DELETE through the view recorded as new facts on queue storage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, install_queue_storage
from awa.domain.job import JobSpec, QueueCounts
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "view"
RING_CHILDREN = r"^(ready_entries|claims|closures|tombstones|done_entries)_[0-9]+$"


@pytest.fixture
def clock() -> ManualClock:
    # Near the database clock: the view triggers read now().
    return ManualClock(datetime.now(UTC))


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _counts(engine: QueueStorageEngine) -> QueueCounts:
    return next(c for c in await engine.queue_counts() if c.queue == QUEUE)


def _ring_rewrites(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
            "WHERE schemaname = 'awa' AND relname ~ %s",
            (RING_CHILDREN,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_view_lists_canonical_and_queue_storage_jobs(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    jobs = await engine.enqueue_many([JobSpec(kind="qs", queue=QUEUE) for _ in range(3)])
    await engine.enqueue_many(
        [JobSpec(kind="later", queue=QUEUE, run_at=clock.now() + timedelta(hours=1))]
    )
    claims = await engine.claim(QUEUE, limit=2)
    await engine.complete([claims[0].lease])
    await sql(migrated_database_url, "INSERT INTO awa.jobs (kind, queue) VALUES ('canon', 'view')")

    rows = await sql(migrated_database_url, "SELECT * FROM awa.jobs ORDER BY id")
    by_kind_state = sorted((r["kind"], r["state"]) for r in rows)
    assert by_kind_state == [
        ("canon", "available"),
        ("later", "scheduled"),
        ("qs", "available"),
        ("qs", "completed"),
        ("qs", "running"),
    ]
    canonical = await sql(migrated_database_url, "SELECT id FROM awa.canonical_jobs")
    assert [r["kind"] for r in rows if r["id"] == canonical[0]["id"]] == ["canon"]
    one = await sql(migrated_database_url, "SELECT * FROM awa.jobs WHERE id = %s", jobs[0].id)
    snapshot = await engine.get_job(jobs[0].id)
    assert snapshot is not None and len(one) == 1
    assert one[0]["state"] == snapshot.state.sql_name
    assert one[0]["finalized_at"] == snapshot.finalized_at
    terminal = await sql(migrated_database_url, "SELECT id FROM awa.terminal_jobs")
    assert [r["id"] for r in terminal] == [claims[0].job.id]


async def test_moving_a_deadline_through_the_view_feeds_the_deadline_rescue(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    await engine.enqueue_many([JobSpec(kind="slow", queue=QUEUE, max_attempts=3)])
    (claim,) = await engine.claim(QUEUE, limit=1, deadline=timedelta(hours=1))
    assert await engine.rescue_expired_deadlines() == []

    updated = await sql(
        migrated_database_url,
        # Relative to the engine's clock, not the database's: a slow host must not move
        # the deadline past the clock the rescue reads.
        "UPDATE awa.jobs SET deadline_at = %s WHERE id = %s RETURNING deadline_at",
        clock.now() - timedelta(seconds=1),
        claim.job.id,
    )
    assert len(updated) == 1
    job = await engine.get_job(claim.job.id)
    assert job is not None and job.state == JobState.Running
    assert job.deadline_at == updated[0]["deadline_at"]

    clock.advance(timedelta(seconds=5))
    rescued = await engine.rescue_expired_deadlines()
    assert [(r.lease, r.new_state, r.reason) for r in rescued] == [
        (claim.lease, JobState.Retryable, "deadline exceeded")
    ]
    assert await engine.complete([claim.lease]) == [Ack.STALE]


async def test_failing_a_running_job_through_the_view(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="stuck", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    before = _ring_rewrites(migrated_database_url)

    changed = await sql(
        migrated_database_url,
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s RETURNING id",
        claim.job.id,
    )
    assert len(changed) == 1
    job = await engine.get_job(claim.job.id)
    assert job is not None and job.state == JobState.Failed and job.finalized_at is not None
    assert await engine.complete([claim.lease]) == [Ack.STALE]
    counts = await _counts(engine)
    assert counts.counts[JobState.Running] == 0
    assert counts.counts[JobState.Failed] == 1
    assert _ring_rewrites(migrated_database_url) == before
    # The failed job can be retried by the operator like any other.
    retried = await engine.retry_job(claim.job.id)
    assert retried is not None and retried.state == JobState.Available


async def test_repairing_waiting_jobs_through_the_view(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    later = clock.now() + timedelta(hours=1)
    ready, scheduled = await engine.enqueue_many(
        [JobSpec(kind="a", queue=QUEUE), JobSpec(kind="b", queue=QUEUE, run_at=later)]
    )
    await sql(
        migrated_database_url,
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s",
        ready.id,
    )
    await sql(
        migrated_database_url,
        "UPDATE awa.jobs SET run_at = run_at - interval '2 hours', priority = 1 WHERE id = %s",
        scheduled.id,
    )
    failed = await engine.get_job(ready.id)
    moved = await engine.get_job(scheduled.id)
    assert failed is not None and failed.state == JobState.Failed
    assert moved is not None and moved.state == JobState.Scheduled
    assert moved.run_at == later - timedelta(hours=2) and moved.priority == 1
    assert await engine.promote_due() == 1
    claims = await engine.claim(QUEUE, limit=5)
    assert [c.job.id for c in claims] == [scheduled.id]
    counts = await _counts(engine)
    assert counts.counts[JobState.Failed] == 1
    assert counts.counts[JobState.Available] == 0
    assert counts.counts[JobState.Running] == 1


async def test_deleting_through_the_view_appends_tombstones_and_markers(
    engine: QueueStorageEngine, migrated_database_url: str, clock: ManualClock
) -> None:
    jobs = await engine.enqueue_many(
        [
            JobSpec(kind="gone", queue=QUEUE, unique_key=b"view-u"),
            JobSpec(kind="done", queue=QUEUE),
            JobSpec(kind="later", queue=QUEUE, run_at=clock.now() + timedelta(hours=1)),
        ]
    )
    claims = await engine.claim(QUEUE, limit=2)
    done = next(c for c in claims if c.job.kind == "done")
    other = next(c for c in claims if c.job.kind == "gone")
    await engine.complete([done.lease])
    await engine.release(other.lease, error="back")
    before = _ring_rewrites(migrated_database_url)
    assert (await _counts(engine)).completed_last_hour == 1

    deleted = await sql(
        migrated_database_url, "DELETE FROM awa.jobs WHERE queue = %s RETURNING id", QUEUE
    )
    assert sorted(r["id"] for r in deleted) == sorted(job.id for job in jobs)
    assert await sql(migrated_database_url, "SELECT id FROM awa.jobs") == []
    for job in jobs:
        assert await engine.get_job(job.id) is None
    assert await sql(migrated_database_url, "SELECT * FROM awa.job_unique_claims") == []
    # Every counter (and the recent-completion bucket) went back to zero: the queue is
    # no longer listed at all.
    assert [c for c in await engine.queue_counts() if c.queue == QUEUE] == []
    buckets = await sql(
        migrated_database_url, "SELECT coalesce(sum(n), 0) AS n FROM awa.completions"
    )
    assert buckets[0]["n"] == 0
    assert _ring_rewrites(migrated_database_url) == before
    # The released key can be taken again.
    await engine.enqueue_many([JobSpec(kind="again", queue=QUEUE, unique_key=b"view-u")])


async def test_live_attempt_body_is_immutable_through_the_view(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await engine.enqueue_many([JobSpec(kind="run", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        await sql(
            migrated_database_url,
            "UPDATE awa.jobs SET args = '{\"x\": 1}' WHERE id = %s",
            claim.job.id,
        )
    job = await engine.get_job(claim.job.id)
    assert job is not None and job.args == {} and job.state == JobState.Running


async def test_view_covers_the_active_non_default_schema(
    migrated_database_url: str, clock: ManualClock
) -> None:
    await install_queue_storage(migrated_database_url, "qs_view")
    other = await QueueStorageEngine.open(
        migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF, schema="qs_view"
    )
    try:
        (job,) = await other.enqueue_many([JobSpec(kind="elsewhere", queue=QUEUE)])
        # Not named by the storage transition: not part of awa.jobs.
        assert (
            await sql(migrated_database_url, "SELECT id FROM awa.jobs WHERE id = %s", job.id) == []
        )
        await sql(
            migrated_database_url,
            "UPDATE awa.storage_transition_state SET state = 'active', "
            "current_engine = 'queue_storage', active_engine = 'queue_storage', "
            "details = jsonb_build_object('schema', 'qs_view')",
        )
        rows = await sql(
            migrated_database_url, "SELECT kind, state FROM awa.jobs WHERE id = %s", job.id
        )
        assert rows == [{"kind": "elsewhere", "state": "available"}]

        (claim,) = await other.claim(QUEUE, limit=1, deadline=timedelta(hours=1))
        await sql(
            migrated_database_url,
            "UPDATE awa.jobs SET deadline_at = %s WHERE id = %s",
            clock.now() - timedelta(seconds=1),
            job.id,
        )
        clock.advance(timedelta(seconds=5))
        rescued = await other.rescue_expired_deadlines()
        assert [r.lease for r in rescued] == [claim.lease]
        deleted = await sql(
            migrated_database_url, "DELETE FROM awa.jobs WHERE id = %s RETURNING id", job.id
        )
        assert deleted == [{"id": job.id}]
        assert await other.get_job(job.id) is None
    finally:
        await other.close()
