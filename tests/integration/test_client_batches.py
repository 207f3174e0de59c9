"""``awa.Batch`` through the client (ADR 0035): the batch's jobs and its callback are
inserted in one transaction (the caller's, or one of its own), the callback runs after
the last job with ``job.batch`` holding the counts, and bad batches are refused before
anything is written; the blocking twin does the same."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

import awa
import awa.testing
from awa.domain.batches import MAX_BATCH_SIZE, BatchCounts
from awa.domain.errors import ValidationError
from awa.domain.states import JobState

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@attrs.frozen
class Part:
    n: int


@attrs.frozen
class Summary:
    name: str


async def _count(client: awa.AsyncClient, queue: str) -> int:
    return len(await client.list_jobs(queue=queue, limit=10_000))


async def test_the_callback_runs_last_and_reads_the_counts(migrated_database_url: str) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:
        ran: list[str] = []
        seen: list[BatchCounts | None] = []

        @client.task(Part)
        async def part(job: awa.Job[Part]) -> awa.Cancel | None:
            ran.append(f"part {job.args.n}")
            if job.args.n == 3:
                raise RuntimeError("part 3 is broken")
            if job.args.n == 4:
                return awa.Cancel("not needed")
            seen.append(job.batch)
            return None

        @client.task(Summary)
        async def summary(job: awa.Job[Summary]) -> None:
            ran.append("summary")
            seen.append(job.batch)

        batch = awa.Batch(Summary("night"), queue="batch_b")
        assert [batch.add(Part(n), queue="batch_a", max_attempts=1) for n in (1, 2, 3, 4)] == [
            0,
            1,
            2,
            3,
        ]
        inserted = await batch.insert(client)
        assert inserted.id == inserted.callback.id
        assert inserted.callback.state == JobState.Scheduled
        assert [j.state for j in inserted.jobs] == [JobState.Available] * 4
        assert await awa.testing.drain(client, "batch_b") == []
        await awa.testing.drain(client, "batch_a")
        (done,) = await awa.testing.drain(client, "batch_b")
        assert done.is_completed()
        assert ran == ["part 1", "part 2", "part 3", "part 4", "summary"]
        assert seen == [None, None, BatchCounts(4, 2, 1, 1)]
    finally:
        await client.close()


async def test_a_batch_is_inserted_in_the_callers_transaction(
    migrated_database_url: str,
) -> None:
    async with awa.AsyncClient(migrated_database_url) as client:
        batch = awa.Batch(Summary("tx"), queue="batch_tx")
        batch.add(Part(1), queue="batch_tx")
        with pytest.raises(RuntimeError, match="abandon"):
            async with await client.transaction() as tx:
                await batch.insert(tx)
                raise RuntimeError("abandon")
        assert await _count(client, "batch_tx") == 0
        async with await client.transaction() as tx:
            inserted = await batch.insert(tx)
        assert await _count(client, "batch_tx") == 2
        assert (await client.get_job(inserted.id)).state == JobState.Scheduled


async def test_bad_batches_are_refused_and_write_nothing(migrated_database_url: str) -> None:
    async with awa.AsyncClient(migrated_database_url) as client:
        with pytest.raises(ValidationError, match="batch: has no jobs"):
            await awa.Batch(Summary("empty"), queue="batch_bad").insert(client)
        big = awa.Batch(Summary("big"), queue="batch_bad")
        for n in range(MAX_BATCH_SIZE):
            big.add(Part(n), queue="batch_bad")
        with pytest.raises(ValidationError, match=f"at most {MAX_BATCH_SIZE}"):
            big.add(Part(-1), queue="batch_bad")
        assert len(big) == MAX_BATCH_SIZE
        with pytest.raises(ValidationError, match="run_at"):
            awa.Batch(Summary("late"), run_at=datetime.now(UTC))
        with pytest.raises(ValidationError, match="priority"):
            awa.Batch(Summary("p"), priority=99)
        with pytest.raises(ValidationError, match="priority"):
            awa.Batch(Summary("ok")).add(Part(1), priority=99)
        with pytest.raises(TypeError, match="AsyncClient or a Transaction"):
            await big.insert(object())
        assert await _count(client, "batch_bad") == 0


def test_the_blocking_twin(migrated_database_url: str) -> None:
    with awa.Client(migrated_database_url) as client:
        batch = awa.Batch(Summary("sync"), queue="batch_sync")
        batch.add(Part(1), queue="batch_sync")
        batch.add(Part(2), queue="batch_sync")
        inserted = batch.insert_sync(client)
        with client.transaction() as tx:
            again = batch.insert_sync(tx)
        assert [len(inserted.jobs), len(again.jobs)] == [2, 2]
        assert client.get_job(inserted.id).state == JobState.Scheduled
        with pytest.raises(ValidationError, match="no jobs"):
            awa.Batch(Summary("none")).insert_sync(client)
        with pytest.raises(TypeError, match="Client or a SyncTransaction"):
            batch.insert_sync(object())
