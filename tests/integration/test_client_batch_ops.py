"""Batch operations through ``AsyncClient`` / ``Client``: validation, the records the
leader of a running worker drives, and a move over thousands of jobs while workers drain
them (on canonical and on queue storage)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa import AsyncClient, BatchOperationFilter, Job, JobState, ValidationError
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Item:
    n: int


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


async def _final(client: AsyncClient, op_id: str, timeout: float = 60) -> dict[str, Any]:
    """The batch operation once it finished (completed, cancelled or failed)."""

    async def finished() -> dict[str, Any] | None:
        op = dict(await client.get_batch_operation(op_id))
        return op if op["state"] in ("completed", "cancelled", "failed") else None

    op: dict[str, Any] = await until(finished, f"batch operation {op_id} finished", timeout=timeout)
    return op


async def test_bad_requests_are_refused_with_named_errors(client: AsyncClient) -> None:
    scope: BatchOperationFilter = {"queue": "q"}
    cases: list[tuple[Any, type[Exception], str]] = [
        (client.preview_set_priority(9, filter=scope), ValidationError, "between 1 and 4"),
        (client.preview_move_queue("", filter=scope), ValidationError, "1..=200 characters"),
        (client.preview_move_queue("q2", priority=0, filter=scope), ValidationError, "1 and 4"),
        (
            client.preview_set_priority(3, filter={"state": "running"}),
            ValidationError,
            "set_priority only supports available or scheduled state filters",
        ),
        (client.preview_set_priority(3, filter={"state": "nope"}), ValueError, "unknown job state"),
        (
            client.preview_set_priority(3, filter={"bogus": 1}),  # type: ignore[arg-type]
            ValidationError,
            "unknown field",
        ),
        (
            client.preview_set_priority(3, filter={"created_at_gte": "2020-01-01"}),
            ValueError,
            "invalid RFC3339 timestamp",
        ),
        (
            client.preview_set_priority(3, filter={"created_at_gte": datetime(2020, 1, 1)}),
            TypeError,
            "tzinfo",
        ),
        (client.preview_set_priority(3, filter={"ids": "1"}), TypeError, "filter.ids"),  # type: ignore[arg-type]
        (
            client.preview_batch_operation("delete", spec={}, filter=scope),  # type: ignore[arg-type]
            ValidationError,
            "unknown batch operation kind: delete",
        ),
        (
            client.preview_batch_operation("set_priority", spec={}, filter=scope),
            ValueError,
            "batch operation spec missing 'priority'",
        ),
        (client.set_priority(3), ValidationError, "requires a filter or allow_all=true"),
        (client.set_priority(3, filter={"ids": []}), ValidationError, "allow_all"),
        (
            client.list_batch_operations(state="bogus"),  # type: ignore[arg-type]
            ValidationError,
            "unknown batch operation state: bogus",
        ),
        (client.get_batch_operation("xyz"), ValueError, "invalid batch operation id"),
        (
            client.get_batch_operation("00000000-0000-0000-0000-000000000000"),
            ValidationError,
            "batch operation not found",
        ),
        (
            client.cancel_batch_operation("00000000-0000-0000-0000-000000000000"),
            ValidationError,
            "cannot be cancelled",
        ),
        (client.purge_batch_operations(datetime(2100, 1, 1)), TypeError, "tzinfo"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words.replace("(", r"\(").replace(".", r"\.")):
            await call
    assert await client.list_batch_operations() == []


async def test_preview_submit_run_get_list_purge(client: AsyncClient) -> None:
    jobs = [await client.insert(Item(n), queue="q1", tags=["t"] if n % 2 else []) for n in range(5)]
    scheduled = await client.insert(Item(9), queue="q1", run_at="2099-01-01T00:00:00Z")
    preview = await client.preview_set_priority(4, filter={"queue": "q1"})
    assert preview["total_matched"] == 6
    assert [s["id"] for s in preview["sample"]] == [j.id for j in jobs] + [scheduled.id]
    tagged = await client.preview_move_queue("q2", filter={"queue": "q1", "tag": "t"})
    assert tagged["total_matched"] == 2
    op = await client.move_queue("q2", priority=1, filter={"tag": "t"}, submitted_by="ops")
    assert op["state"] == "pending" and op["submitted_by"] == "ops"
    assert op["spec"] == {"op_kind": "move_queue", "queue": "q2", "priority": 1}
    assert op["filter"]["tag"] == "t" and op["filter"]["queue"] is None
    everything = await client.set_priority(3, allow_all=True)

    @client.task(Item, queue="side")
    async def never(job: Job[Item]) -> None:  # pragma: no cover - nothing is enqueued there
        raise AssertionError("not expected")

    await client.start([("side", 1)], leader_election_interval_ms=100)
    try:
        moved = await _final(client, op["id"])
        rest = await _final(client, everything["id"])
    finally:
        await client.shutdown()
    assert (moved["state"], moved["total_matched"], moved["processed"]) == ("completed", 2, 2)
    assert moved["started_at"] is not None and moved["runner_instance"] is not None
    assert moved["retention_until"] is not None
    assert rest["total_matched"] == 6 and rest["processed"] + rest["skipped"] == 6
    odd = await client.get_job(jobs[1].id)
    assert (odd.queue, odd.priority) == ("q2", 3)
    assert odd.metadata == {"_awa_original_priority": 2, "_awa_original_queue": "q1"}
    still = await client.get_job(scheduled.id)
    assert still.state == JobState.Scheduled and still.priority == 3
    listed = await client.list_batch_operations(state="completed")
    assert {o["id"] for o in listed} == {op["id"], everything["id"]}
    with pytest.raises(ValidationError, match="cannot be cancelled"):
        await client.cancel_batch_operation(op["id"])
    purged = await client.purge_batch_operations(datetime.now(UTC) + timedelta(seconds=1))
    assert purged == 2 and await client.list_batch_operations() == []


@pytest.mark.parametrize("storage", ["canonical", "queue_storage"])
@pytest.mark.parametrize(
    "total",
    [pytest.param(300, id="hundreds"), pytest.param(3000, id="thousands", marks=pytest.mark.slow)],
)
async def test_a_move_while_workers_drain_the_jobs(
    client: AsyncClient, storage: str, total: int
) -> None:
    """Nothing is lost or run twice, and every job moved ran in its new queue. The source
    workers hold their first jobs until the move has moved some, so the move overlaps
    the drain on every engine however busy the host (no timing involved).
    The 3000-job run is ``slow``:
    ``scripts/test -m slow tests/integration/test_client_batch_ops.py``."""
    if storage == "queue_storage":
        await client.install_queue_storage()
    await client.insert_many_copy([Item(n) for n in range(total)], queue="src")
    runs: Counter[int] = Counter()
    ran_in: dict[int, str] = {}
    history: dict[int, list[tuple[str, int, int]]] = {}
    origin: dict[int, Any] = {}
    moving = asyncio.Event()

    @client.task(Item, queue="src")
    async def work(job: Job[Item]) -> None:
        runs[job.id] += 1
        ran_in[job.id] = job.queue
        history.setdefault(job.id, []).append((job.queue, job.attempt, job.priority))
        origin[job.id] = job.metadata.get("_awa_original_queue")
        if job.queue == "src":
            await moving.wait()

    async def moved_some(op_id: str) -> bool:
        now = await client.get_batch_operation(op_id)
        return bool(now["processed"] > 0 or now["state"] in ("completed", "cancelled", "failed"))

    await client.start([("src", 2), ("dst", 4)], leader_election_interval_ms=100)
    try:
        op = await client.move_queue("dst", filter={"queue": "src"})
        await until(lambda: moved_some(op["id"]), "the move's first jobs", timeout=300)
        moving.set()
        done = await _final(client, op["id"], timeout=300)
        await until(lambda: len(runs) >= total, "every job ran", timeout=300, interval=0.1)
    finally:
        moving.set()
        await client.shutdown()
    assert done["state"] == "completed" and done["errored"] == 0, done
    assert done["processed"] > 0, "the move never overlapped the drain"
    assert done["processed"] + done["skipped"] == done["total_matched"]
    assert len(runs) == total, "jobs were lost"
    twice = {job_id: history[job_id] for job_id, n in runs.items() if n > 1}
    assert not twice, f"jobs ran twice: {twice}"
    in_dst = {job_id for job_id, queue in ran_in.items() if queue == "dst"}
    # Each moved job ran once, in its new queue, and only moved jobs ran there.
    assert len(in_dst) == done["processed"]
    # Provenance as the handler saw it (finished history may be pruned by now).
    assert {origin[job_id] for job_id in in_dst} == {"src"}
    stats = {s.queue: s for s in await client.queue_stats()}
    assert all(stats[q].available == 0 for q in ("src", "dst") if q in stats)
