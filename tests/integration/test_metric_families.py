"""The metric families recorded where the client API acts, on both Postgres engines, read
with the SDK's in-memory reader: inserts (single, bulk, COPY, transactions), DLQ moves,
retries and purges, claims per enqueue shard, and the leader's queue-depth and storage
gauges."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

import awa
from awa import AsyncClient, Job, JobState
from awa.adapters.clock import SystemClock
from awa.domain.job import JobRecord
from awa.runtime import metrics
from awa.runtime.queue_gauges import QueueGauges
from tests.support.otel import Recorder, recording
from tests.support.waits import job_in_state

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(60)]

QUEUE = "awa.job.queue"
KIND = "awa.job.kind"


@dataclasses.dataclass
class Report:
    n: int


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


def _inserted(recorder: Recorder, queue: str) -> float:
    return recorder.total("awa.job.inserted", {QUEUE: queue, KIND: "report"})


async def _failed(client: AsyncClient, queue: str, count: int) -> list[JobRecord]:
    """``count`` failed jobs in ``queue`` (claimed and failed through the engine)."""
    await client.insert_many_copy([Report(n) for n in range(count)], queue=queue)
    engine = await client.admin_engine()
    claims = await engine.claim(queue, limit=count)
    for claim in claims:
        await engine.fail(claim.lease, error="broken")
    return [c.job for c in claims]


async def test_inserts_and_dlq_operations_are_counted_on_canonical_storage(
    client: AsyncClient,
) -> None:
    with recording() as recorder:
        await client.insert(Report(1), queue="ins")
        assert _inserted(recorder, "ins") == 1
        # A bulk insert counts what it inserted, not the duplicate it skipped.
        await client.insert_many_copy(
            [Report(2), Report(2), Report(3)], queue="ins", unique_opts={"by_args": True}
        )
        assert _inserted(recorder, "ins") == 3
        # Transactions count at commit, and only what the commit kept.
        async with await client.transaction() as tx:
            await tx.insert(Report(4), queue="ins")
            await tx.insert_many([Report(5), Report(6)], queue="ins")
            assert _inserted(recorder, "ins") == 3
        assert _inserted(recorder, "ins") == 6
        async with await client.transaction() as tx:
            await tx.insert(Report(7), queue="ins")
            await tx.rollback()
        tx = await client.transaction()
        await tx.insert(Report(8), queue="ins")
        with pytest.raises(awa.AwaError):
            await tx.execute("SELECT 1/0")
        await tx.commit()  # rolls back: the failed statement aborted the transaction
        assert _inserted(recorder, "ins") == 6
        assert [j.queue for j in await client.list_jobs(queue="ins")].count("ins") == 6

        one, *rest = await _failed(client, "dlq", 4)
        await client.move_failed_to_dlq(one.id, "manual")
        moved = {"awa.dlq.reason": "manual", QUEUE: "dlq", KIND: "report"}
        assert recorder.total("awa.job.dlq_moved", moved) == 1
        assert await client.bulk_move_failed_to_dlq(queue="dlq", reason="triage") == 3
        triaged = {"awa.dlq.reason": "triage", QUEUE: "dlq"}
        assert recorder.total("awa.job.dlq_moved", triaged) == 3
        assert await client.retry_from_dlq(one.id) is not None
        assert recorder.total("awa.job.dlq_retried", {QUEUE: "dlq", KIND: "report"}) == 1
        assert await client.purge_dlq_job(rest[0].id)
        assert not await client.purge_dlq_job(rest[0].id)
        assert recorder.total("awa.job.dlq_purged", {QUEUE: "dlq", KIND: "report"}) == 1
        assert await client.bulk_retry_from_dlq(queue="dlq") == 2
        assert recorder.total("awa.job.dlq_retried", {QUEUE: "dlq"}) == 3
        await _failed(client, "dlq2", 2)
        await client.bulk_move_failed_to_dlq(queue="dlq2")
        assert await client.purge_dlq(queue="dlq2") == 2
        assert recorder.total("awa.job.dlq_purged", {QUEUE: "dlq2"}) == 2
        assert recorder.total("awa.job.dlq_purged") == 3


async def test_queue_storage_copy_inserts_shard_claims_and_the_leader_gauges(
    client: AsyncClient,
) -> None:
    await client.install_queue_storage()
    engine = await client.admin_engine()
    with recording() as recorder:
        count = await client.enqueue_many_copy(
            [Report(1), Report(1), Report(2)], queue="qs", unique_opts={"by_args": True}
        )
        assert count == 2 and _inserted(recorder, "qs") == 2
        await client.insert(Report(3), queue="qs", ordering_key="customer-7")
        gauges = QueueGauges(engine, _instruments(), clock=SystemClock())
        gauges.attach()
        await gauges.refresh()
        depth = recorder.points("awa.queue.depth")
        assert depth[frozenset({(QUEUE, "qs"), ("awa.job.state", "available")})] == 3
        assert recorder.points("awa.queue.lag")[frozenset({(QUEUE, "qs")})] >= 0

        done: list[int] = []

        @client.task(Report, queue="qs")
        async def report(job: Job[Report]) -> None:
            done.append(job.id)

        await client.start([("qs", 2)], poll_interval_ms=50)
        try:
            ids = [j.id for j in await client.list_jobs(queue="qs")]
            for job_id in ids:
                await job_in_state(client, job_id, JobState.Completed)
            await gauges.refresh()
        finally:
            await client.shutdown()
        claimed = recorder.points("awa.job.claimed")
        shards = {dict(key).get("awa.enqueue.shard") for key in claimed}
        assert sum(claimed.values()) == 3
        assert None not in shards  # every queue-storage claim names its lane's shard
        # The job with an ordering key came from shard 0 (one shard), the others from
        # the queue's free lanes (negative shards).
        assert 0 in shards and any(s < 0 for s in shards if s is not None)
        depth = recorder.points("awa.queue.depth")
        assert depth[frozenset({(QUEUE, "qs"), ("awa.job.state", "available")})] == 0
        state = recorder.points("awa.storage.state")
        assert [dict(key)["awa.storage.state"] for key in state] == ["active"]
        live = recorder.points("awa.storage.live_runtime_capability")
        assert live[frozenset({("awa.storage.capability", "queue_storage")})] >= 1
        assert recorder.points("awa.storage.canonical_live_backlog") == {}
        ready = recorder.points("awa.storage.transition_ready")
        assert set(ready.values()) == {0}  # nothing to enter or finalize once active
        gauges.detach()


def _instruments() -> metrics.Instruments:
    found = metrics.instruments()
    assert found is not None
    return found


async def test_a_failed_callback_that_moves_its_job_into_the_dlq_counts_as_dlq_moved(
    client: AsyncClient,
) -> None:
    engine = await client.admin_engine()
    await engine.set_queue_dlq("cb", enabled=True)
    for n in range(3):
        await client.insert(Report(n), queue="cb" if n < 2 else "plain")
    with recording() as recorder:
        for queue, action in (("cb", "fail"), ("cb", "complete"), ("plain", "fail")):
            (claim,) = await engine.claim(queue, limit=1)
            callback_id = str(uuid.uuid4())
            await engine.register_callback(
                claim.lease, callback_id=callback_id, timeout=timedelta(hours=1)
            )
            await engine.wait_for_callback(claim.lease)
            if action == "fail":
                await client.fail_external(callback_id, "the payment was declined")
            else:
                await client.complete_external(callback_id)
        moved = recorder.points("awa.job.dlq_moved")
    assert await client.dlq_depth(queue="cb") == 1
    assert await client.dlq_depth(queue="plain") == 0
    assert moved == {
        frozenset({(QUEUE, "cb"), (KIND, "report"), ("awa.dlq.reason", "callback_failed")}): 1,
    }
