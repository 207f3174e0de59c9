"""The leader's retention cleanup reads only what can be due: its read of the terminal
history is bounded by the finalized_at indexes, not a pass over every job."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.statements import Statements, numbered
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_retention_read"
QUEUE = "kept"


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, clock=clock) as opened:
        yield opened


async def _completed(engine: QueueStorageEngine, clock: ManualClock, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
        (claim,) = await engine.claim(QUEUE, limit=1)
        await engine.complete([claim.lease])
        ids.append(claim.job.id)
        clock.advance(1)
    return ids


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of the engine's tables returned, every loop counted."""
    own = 0
    if "Relation Name" in plan:
        own = int(plan["Actual Rows"]) * int(plan["Actual Loops"])
    return own + sum(_rows_read(p) for p in plan.get("Plans", []))


async def test_nothing_due_reads_no_history(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    await _completed(engine, clock, 20)
    query, names = numbered(Statements(SCHEMA)["retention_due"])
    # Every cutoff before the first completion: nothing is due.
    before = clock.now() - timedelta(hours=1)
    params = {
        "completed_before": before,
        "cancelled_before": before,
        "failed_before": before,
        "after_at": datetime.min.replace(tzinfo=UTC),
        "after_id": 0,
        "limit": 1000,
    }
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        cur = psycopg.RawCursor(conn)
        cur.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + query, [params[name] for name in names])
        row = cur.fetchone()
    assert row is not None
    found = row[0] if isinstance(row[0], list) else json.loads(row[0])
    assert _rows_read(found[0]["Plan"]) == 0
    assert (
        await engine.cleanup_retention(completed=timedelta(hours=2), failed=timedelta(hours=2)) == 0
    )


async def test_a_replaced_terminal_fact_does_not_hold_back_the_due_ones(
    engine: QueueStorageEngine, clock: ManualClock
) -> None:
    ids = []
    for _ in range(3):
        (job,) = await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE)])
        await engine.cancel_job(job.id)
        ids.append(job.id)
        clock.advance(1)
    first, second, third = ids
    # The two oldest are retried: their cancelled facts stay behind, no longer their
    # jobs' snapshots, and fill the first page of candidates.
    for job_id in (first, second):
        retried = await engine.retry_job(job_id)
        assert retried is not None and retried.state == JobState.Available
    clock.advance(timedelta(hours=2))
    deleted = await engine.cleanup_retention(
        completed=timedelta(hours=1), failed=timedelta(hours=1), batch_size=2
    )
    assert deleted == 1
    assert await engine.get_job(third) is None
    for job_id in (first, second):
        kept = await engine.get_job(job_id)
        assert kept is not None and kept.state == JobState.Available
