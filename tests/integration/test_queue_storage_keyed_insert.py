"""A keyed batch on queue storage (ADR 0029, issue 43): every job of a batch over many
distinct concurrency keys goes to its own key's lane, in order, and stays limited per key;
the batch's statement does work in proportion to its rows, whatever the number of keys.

The cost is checked by the work the server reports, not by time: ``EXPLAIN ANALYZE`` of
``enqueue_ready`` under its generic plan (as the engine runs it), summing the rows every
plan node produced over all its loops and the rows its filters dropped. Before the fix the
lane lookup ran once per row over every lane and joined each lane with every other (rows x
keys x keys: 200 jobs on 200 keys, about 8 million rows)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.statements import numbered
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, keyed_shard
from awa.domain.job import JobSpec
from tests.support.engines import CONTRACT_BACKOFF
from tests.support.sql import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "keyed_insert"
#: Distinct keys of one batch: enough that rows x keys (or keys x keys) work would be far
#: over the bound below.
KEYS = 300
#: Work allowed per input row (every CTE touches each row or lane a few times).
WORK_PER_ROW = 60


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=ManualClock(), backoff=CONTRACT_BACKOFF, max_connections=4
    )
    try:
        yield opened
    finally:
        await opened.close()


def _specs(keys: int, per_key: int = 1, tag: str = "k") -> list[JobSpec]:
    return [
        JobSpec(
            kind="keyed",
            queue=QUEUE,
            args={"n": n},
            metadata={CONCURRENCY_KEY_METADATA: f"{tag}-{n % keys}"},
        )
        for n in range(keys * per_key)
    ]


async def _lanes(url: str) -> dict[int, tuple[int, int]]:
    """job id -> (shard, lane_seq) of the queue's ready rows."""
    rows = await sql(
        url, "SELECT job_id, shard, lane_seq FROM awa.ready_entries WHERE queue = %s", QUEUE
    )
    return {r["job_id"]: (r["shard"], r["lane_seq"]) for r in rows}


def _work(node: dict[str, Any]) -> int:
    """Rows a plan node and its children produced over all loops, and rows they dropped."""
    loops = int(node.get("Actual Loops", 1))
    own = int(node.get("Actual Rows", 0)) * loops
    own += int(node.get("Rows Removed by Join Filter", 0))
    own += int(node.get("Rows Removed by Filter", 0))
    return own + sum(_work(child) for child in node.get("Plans", []))


async def _enqueue_work(engine: QueueStorageEngine, url: str, specs: list[JobSpec]) -> int:
    """The work of enqueue_ready for ``specs`` under its generic plan (rolled back)."""
    params = engine._parts.enqueue._enqueue_params(
        specs, ManualClock().now(), notify=False, wake=set()
    )
    query, names = numbered(engine._parts.statements["enqueue_ready"])
    async with (
        await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn,
        conn.transaction(force_rollback=True),
    ):
        await conn.execute(b"SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute(b"PREPARE keyed_enqueue AS " + query)
        cur = psycopg.AsyncClientCursor(conn, row_factory=dict_row)
        marks = ", ".join(["%s"] * len(names))
        await cur.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE keyed_enqueue({marks})".encode(),
            [params[name] for name in names],
        )
        (row,) = await cur.fetchall()
        return _work(row["QUERY PLAN"][0]["Plan"])


@pytest.mark.parametrize("copy", [False, True], ids=["insert", "copy"])
async def test_a_batch_over_as_many_keys_puts_each_job_in_its_keys_lane_in_order(
    engine: QueueStorageEngine, migrated_database_url: str, copy: bool
) -> None:
    async def enqueue(specs: list[JobSpec]) -> None:
        if copy:
            assert await engine.enqueue_many_copy(specs) == len(specs)
        else:
            assert len(await engine.enqueue_many(specs)) == len(specs)

    await enqueue(_specs(KEYS))
    # Again on the same keys (their lanes exist), two jobs per key.
    await enqueue(_specs(KEYS, per_key=2))
    lanes = await _lanes(migrated_database_url)
    rows = await sql(
        migrated_database_url,
        "SELECT job_id, metadata ->> %s AS key FROM awa.ready_entries WHERE queue = %s",
        CONCURRENCY_KEY_METADATA,
        QUEUE,
    )
    by_key: dict[str, list[int]] = {}
    for r in rows:
        assert lanes[r["job_id"]][0] == keyed_shard(r["key"])
        by_key.setdefault(r["key"], []).append(r["job_id"])
    assert len(by_key) == KEYS
    for jobs in by_key.values():
        # FIFO per key: lane positions 0, 1, 2 in job id order.
        assert [lanes[job][1] for job in sorted(jobs)] == [0, 1, 2]
    # Still one running per key under a limit of 1.
    claims = await engine.claim(QUEUE, limit=2 * KEYS, max_running_per_key=1)
    taken = [c.job.metadata[CONCURRENCY_KEY_METADATA] for c in claims]
    assert len(taken) == len(set(taken)) == KEYS
    assert all(c.job.args["n"] < KEYS for c in claims)  # each key's first job


async def test_the_keyed_enqueue_does_work_in_proportion_to_its_rows(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Twice the rows on twice the keys: about twice the work, for new lanes and for
    lanes that exist (their rows updated on conflict)."""
    work: dict[tuple[int, str], int] = {}
    for keys in (KEYS // 2, KEYS):
        tag = f"w{keys}"
        work[keys, "new"] = await _enqueue_work(
            engine, migrated_database_url, _specs(keys, tag=tag)
        )
        await engine.enqueue_many(_specs(keys, tag=tag))
        work[keys, "existing"] = await _enqueue_work(
            engine, migrated_database_url, _specs(keys, tag=tag)
        )
    for lanes in ("new", "existing"):
        assert work[KEYS, lanes] <= WORK_PER_ROW * KEYS, work
        assert work[KEYS, lanes] <= 2.2 * work[KEYS // 2, lanes], work
