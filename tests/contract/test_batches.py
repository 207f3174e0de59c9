"""Batches (ADR 0035) on every engine: a callback waits on its batch's jobs through
``run`` edges and is released exactly once, when the last of them finished (completed,
failed for good, or cancelled), and the edges count how each ended, whatever order
they end in and whichever path ends them (a batch of completions, a failure, the DLQ,
an operator cancel). A rescue or a retry is not an end; an operator retry of a member
that counted already does not count it again nor release the callback twice."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain import batches
from awa.domain.batches import BatchCounts
from awa.domain.dependencies import WAITING_RUN_AT
from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import claim_ids, claim_one, enable_dlq, enqueue, fetch, spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

REPORTS = "contract_reports"


async def batch_of(
    engine: EngineHandle, size: int, **fields: object
) -> tuple[list[int], JobRecord]:
    members = [await enqueue(engine, "batch_member", **fields) for _ in range(size)]
    callback_spec = batches.callback_spec(
        spec("batch_report", queue=REPORTS), [m.id for m in members]
    )
    (callback,) = await engine.engine.enqueue_many([callback_spec])
    return [m.id for m in members], callback


async def counts(engine: EngineHandle, callback: JobRecord) -> BatchCounts:
    return await engine.control.relations.parent_counts(callback.id)


async def end_one(engine: EngineHandle, outcome: str) -> int:
    claim = await claim_one(engine)
    if outcome == "complete":
        assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    elif outcome == "fail":
        assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    elif outcome == "retry":
        assert await engine.engine.retry(claim.lease, error="again") == Ack.APPLIED
    else:
        assert await engine.engine.cancel_attempt(claim.lease, reason="stop") == Ack.APPLIED
    return claim.job.id


async def test_the_callback_runs_once_after_every_job_ended_with_the_counts(
    engine: EngineHandle,
) -> None:
    _, callback = await batch_of(engine, 4)
    assert (callback.state, callback.run_at) == (JobState.Scheduled, WAITING_RUN_AT)
    assert callback.metadata[batches.BATCH_METADATA] == {"size": 4}
    assert await counts(engine, callback) == BatchCounts(4, 0, 0, 0)

    await end_one(engine, "complete")
    await end_one(engine, "fail")
    await end_one(engine, "cancel")
    assert await counts(engine, callback) == BatchCounts(4, 1, 1, 1)
    assert (await fetch(engine, callback.id)).state == JobState.Scheduled
    assert await claim_ids(engine, REPORTS) == []

    await end_one(engine, "complete")
    released = await fetch(engine, callback.id)
    assert (released.state, released.run_at) == (JobState.Available, engine.clock.now())
    final = await counts(engine, callback)
    assert (final, final.pending, final.finished) == (BatchCounts(4, 2, 1, 1), 0, True)
    assert await claim_ids(engine, REPORTS) == [callback.id]
    assert await claim_ids(engine, REPORTS) == []


async def test_the_last_jobs_completed_together_release_the_callback_once(
    engine: EngineHandle,
) -> None:
    # One complete() call ends the batch (queue storage's receipt path sends it again in
    # a transaction that releases the callback).
    _, callback = await batch_of(engine, 3)
    claims = [await claim_one(engine) for _ in range(3)]
    assert await engine.engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * 3
    assert await counts(engine, callback) == BatchCounts(3, 3, 0, 0)
    assert await claim_ids(engine, REPORTS) == [callback.id]


async def test_a_retried_or_rescued_job_is_not_finished(engine: EngineHandle) -> None:
    _, callback = await batch_of(engine, 2)
    await end_one(engine, "retry")
    claim = await claim_one(engine)
    engine.clock.advance(100)
    (rescued,) = await engine.engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert rescued.lease == claim.lease
    assert await counts(engine, callback) == BatchCounts(2, 0, 0, 0)
    assert (await fetch(engine, callback.id)).state == JobState.Scheduled

    engine.clock.advance(timedelta(hours=1))
    await engine.engine.promote_due()
    await end_one(engine, "complete")
    await end_one(engine, "fail")
    assert await counts(engine, callback) == BatchCounts(2, 1, 1, 0)
    assert await claim_ids(engine, REPORTS) == [callback.id]


async def test_a_job_in_the_dlq_counts_as_failed(engine: EngineHandle) -> None:
    await enable_dlq(engine)
    _, callback = await batch_of(engine, 2, max_attempts=1)
    await end_one(engine, "retry")
    await end_one(engine, "complete")
    assert await counts(engine, callback) == BatchCounts(2, 1, 1, 0)
    assert await claim_ids(engine, REPORTS) == [callback.id]


async def test_operator_cancels_count_as_cancelled(engine: EngineHandle) -> None:
    members, callback = await batch_of(engine, 2)
    for member in members:
        assert await engine.engine.cancel_job(member) is not None
    assert await counts(engine, callback) == BatchCounts(2, 0, 0, 2)
    assert await claim_ids(engine, REPORTS) == [callback.id]


async def test_a_job_cancelled_by_its_own_failed_parent_counts_as_cancelled(
    engine: EngineHandle,
) -> None:
    upstream = await enqueue(engine, "upstream", queue="contract_upstream")
    (member,) = await engine.engine.enqueue_many(
        [spec("batch_member", queue="contract_upstream", depends_on=(upstream.id,))]
    )
    plain = await enqueue(engine, "batch_member")
    (callback,) = await engine.engine.enqueue_many(
        [batches.callback_spec(spec("batch_report", queue=REPORTS), [member.id, plain.id])]
    )
    claim = await claim_one(engine, "contract_upstream")
    assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    assert (await fetch(engine, member.id)).state == JobState.Cancelled
    await end_one(engine, "complete")
    assert await counts(engine, callback) == BatchCounts(2, 1, 0, 1)
    assert await claim_ids(engine, REPORTS) == [callback.id]


async def test_retrying_a_counted_job_neither_recounts_nor_runs_the_callback_again(
    engine: EngineHandle,
) -> None:
    _, callback = await batch_of(engine, 2)
    failed = await end_one(engine, "fail")
    await end_one(engine, "complete")
    assert await claim_ids(engine, REPORTS) == [callback.id]
    assert await engine.engine.retry_job(failed) is not None
    await end_one(engine, "complete")
    assert await counts(engine, callback) == BatchCounts(2, 1, 1, 0)
    assert (await fetch(engine, callback.id)).state == JobState.Running
    assert await claim_ids(engine, REPORTS) == []


async def test_empty_and_oversized_batches_and_a_callback_with_run_at_are_refused(
    engine: EngineHandle,
) -> None:
    with pytest.raises(ValidationError, match="no jobs"):
        batches.callback_spec(spec("batch_report"), [])
    with pytest.raises(ValidationError, match=f"at most {batches.MAX_BATCH_SIZE}"):
        batches.callback_spec(spec("batch_report"), range(1, batches.MAX_BATCH_SIZE + 2))
    with pytest.raises(ValidationError, match="run_at"):
        batches.callback_spec(spec("batch_report", run_at=engine.clock.now()), [1])
