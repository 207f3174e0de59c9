"""New jobs are stamped under their lane's lock: a producer that stamped its jobs before
another producer, but got their shared lane after it, appends them in (run_at, job id)
order all the same, so the lane stays ordered and claims walk it along its index (ADR
0006, "Stamped under the lane lock"). Before, such a lane was marked disordered and every
claim sorted its whole unclaimed window: a backlog written by concurrent producers drained
at a fraction of the rate of one written by one producer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from awa.adapters._pg import transition
from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.statements import STAMP_SLACK_MS
from awa.domain.job import JobRecord, JobSpec
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "stamped"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
#: How much later than the first producer the second one stamps its jobs.
AHEAD = timedelta(milliseconds=10)
MICRO = timedelta(microseconds=1)

#: The enqueue paths of new available jobs (ADR 0006's enqueue table).
PATHS = ("enqueue_many", "routed_one", "routed_batch", "unique", "copy", "copy_unique")


@pytest.fixture
def clocks() -> dict[str, ManualClock]:
    return {
        "early": ManualClock(T0),
        "late": ManualClock(T0 + AHEAD),
        "claimer": ManualClock(T0 + 2 * AHEAD),
    }


@pytest.fixture
async def engines(
    migrated_database_url: str, clocks: dict[str, ManualClock]
) -> AsyncIterator[dict[str, QueueStorageEngine]]:
    """``early`` stamps at T0, ``late`` AHEAD later and ``claimer`` later still, on the
    default schema (routed inserts need the remembered route)."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        assert await transition.auto_finalize_if_fresh(conn)
    opened: dict[str, QueueStorageEngine] = {}
    for name, clock in clocks.items():
        opened[name] = await QueueStorageEngine.open(
            migrated_database_url, clock=clock, backoff=CONTRACT_BACKOFF
        )
    try:
        yield opened
    finally:
        for engine in opened.values():
            await engine.close()


async def _write(engine: QueueStorageEngine, path: str, n: int, tag: str) -> list[JobRecord]:
    """``n`` new available jobs through ``path``; the records it returns (none for COPY)."""
    specs = [
        JobSpec(
            kind="k",
            queue=QUEUE,
            args={"tag": tag, "i": i},
            unique_key=f"{tag}-{i}".encode() if path in ("unique", "copy_unique") else None,
        )
        for i in range(n)
    ]
    if path in ("enqueue_many", "unique"):
        return await engine.enqueue_many(specs)
    if path == "routed_one":
        return [(await engine.enqueue_many_routed([spec]))[0] for spec in specs]
    if path == "routed_batch":
        return await engine.enqueue_many_routed(specs)
    assert await engine.enqueue_many_copy(specs) == n
    return []


async def _ready(url: str) -> list[dict[str, Any]]:
    return await sql(
        url,
        "SELECT job_id, run_at, shard, lane_seq, args->>'tag' AS tag FROM awa.ready_entries "
        "WHERE queue = %s ORDER BY shard, lane_seq",
        QUEUE,
    )


async def _disordered(url: str) -> int:
    rows = await sql(
        url,
        "SELECT count(*) AS n FROM awa.lanes l "
        "JOIN awa.claim_heads h USING (queue, priority, shard) "
        "WHERE l.queue = %s AND l.disorder_seq >= h.claim_seq",
        QUEUE,
    )
    return int(rows[0]["n"])


@pytest.mark.parametrize("path", PATHS)
async def test_a_producer_that_gets_the_lane_late_appends_in_order(
    engines: dict[str, QueueStorageEngine], migrated_database_url: str, path: str
) -> None:
    """``early`` stamped before ``late`` but appends after it, to the same lane: its jobs
    are stamped just after the lane's tail, the lane is not disordered, the records the
    insert returns carry the stored run_at, and a claim takes the lane in lane order."""
    late = await _write(engines["late"], "enqueue_many", 3, "late")
    early = await _write(engines["early"], path, 4, "early")

    rows = await _ready(migrated_database_url)
    assert [r["tag"] for r in rows] == ["late"] * 3 + ["early"] * 4
    assert len({r["shard"] for r in rows}) == 1
    assert [r["lane_seq"] for r in rows] == list(range(7))
    assert {r["run_at"] for r in rows[:3]} == {T0 + AHEAD} == {job.run_at for job in late}
    # just after the tail (one job at a time: each just after the one before)
    assert rows[3]["run_at"] == T0 + AHEAD + MICRO
    keys = [(r["run_at"], r["job_id"]) for r in rows]
    assert keys == sorted(keys)
    assert rows[-1]["run_at"] <= T0 + AHEAD + 4 * MICRO
    if early:
        assert [(job.id, job.run_at) for job in early] == [
            (r["job_id"], r["run_at"]) for r in rows[3:]
        ]
    assert await _disordered(migrated_database_url) == 0

    claimed = await engines["claimer"].claim(QUEUE, limit=100)
    assert [c.job.id for c in claimed] == [r["job_id"] for r in rows]
    assert [c.job.run_at for c in claimed] == [r["run_at"] for r in rows]


async def test_a_producer_whose_clock_is_far_behind_keeps_its_stamp(
    engines: dict[str, QueueStorageEngine], migrated_database_url: str
) -> None:
    """A tail more than STAMP_SLACK_MS ahead of the producer's clock is a clock that is
    off, not a wait for the lane: its jobs keep their stamp and the lane is disordered, so
    claims sort it and take them first, as their run_at says."""
    far = await QueueStorageEngine.open(
        migrated_database_url,
        clock=ManualClock(T0 + AHEAD - timedelta(milliseconds=STAMP_SLACK_MS + 1)),
        backoff=CONTRACT_BACKOFF,
    )
    try:
        await _write(engines["late"], "enqueue_many", 3, "late")
        behind = await _write(far, "enqueue_many", 2, "behind")
    finally:
        await far.close()
    rows = await _ready(migrated_database_url)
    assert [r["tag"] for r in rows] == ["late"] * 3 + ["behind"] * 2
    assert [r["run_at"] for r in rows[3:]] == [job.run_at for job in behind]
    assert all(job.run_at < T0 for job in behind)
    assert await _disordered(migrated_database_url) == 1

    claimed = await engines["claimer"].claim(QUEUE, limit=100)
    assert [c.job.id for c in claimed] == [r["job_id"] for r in rows[3:] + rows[:3]]


async def test_a_backlog_of_interleaved_producers_stays_ordered(
    engines: dict[str, QueueStorageEngine],
    clocks: dict[str, ManualClock],
    migrated_database_url: str,
) -> None:
    """Producers taking turns on a lane, each a little behind the last (as concurrent
    producers are), over every path: the lane stays ordered from its first row to its
    last, and a drain in batches takes it in lane order."""
    for turn, path in enumerate(PATHS * 2):
        # every other turn stamps half of AHEAD before the turn that wrote just before it
        writer = "early" if turn % 2 else "late"
        clocks[writer].set(T0 + turn * AHEAD - (AHEAD * 3 / 2 if turn % 2 else timedelta()))
        await _write(engines[writer], path, 5, f"t{turn}")
    rows = await _ready(migrated_database_url)
    assert len(rows) == 5 * 2 * len(PATHS)
    assert len({r["shard"] for r in rows}) == 1
    keys = [(r["run_at"], r["job_id"]) for r in rows]
    assert keys == sorted(keys)
    assert await _disordered(migrated_database_url) == 0

    claimer = engines["claimer"]
    clocks["claimer"].set(max(r["run_at"] for r in rows))
    taken: list[int] = []
    while got := await claimer.claim(QUEUE, limit=7):
        taken.extend(c.job.id for c in got)
        await claimer.complete([c.lease for c in got])
    assert taken == [r["job_id"] for r in rows]
