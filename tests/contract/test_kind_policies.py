"""Per-kind policies (ADR 0028): the retry policy a kind registered decides its retryable
failures and rescues on every engine, with awa-pg's retry as the fallback; and the
effects a kind's rule attaches to an attempt's end are applied with it, atomically."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from awa.domain import lifecycle
from awa.domain.job import JobRecord
from awa.domain.kind_policies import ChangeJob, Effect
from awa.domain.lifecycle import Transition
from awa.domain.policies import RetryPolicy
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, SECOND, claim_one, enable_dlq, enqueue, fetch
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

PARENT = "parent_step"
CHILD_QUEUE = "contract_children"
LATER = timedelta(days=1)


async def test_a_kinds_retry_policy_decides_delay_and_budget(engine: EngineHandle) -> None:
    engine.policies.set_retry(
        "flaky", RetryPolicy(max_attempts=2, backoff="constant", base=30, jitter=0)
    )
    job = await enqueue(engine, "flaky", max_attempts=25)
    claim = await claim_one(engine)
    now = engine.clock.now()
    assert await engine.engine.retry(claim.lease, error="boom") == Ack.APPLIED
    retried = await fetch(engine, job.id)
    assert (retried.state, retried.run_at) == (JobState.Retryable, now + 30 * SECOND)
    engine.clock.advance(30)
    assert await engine.engine.promote_due() == 1
    claim = await claim_one(engine)
    # The policy's budget (2), not the job's own 25, ends it.
    assert await engine.engine.retry(claim.lease, error="boom again") == Ack.APPLIED
    failed = await fetch(engine, job.id)
    assert failed.state == JobState.Failed
    assert [entry["attempt"] for entry in failed.errors] == [1, 2]


async def test_a_kind_without_a_policy_keeps_the_default_backoff(engine: EngineHandle) -> None:
    engine.policies.set_retry("flaky", RetryPolicy(backoff="constant", base=30))
    job = await enqueue(engine, "steady")
    claim = await claim_one(engine)
    now = engine.clock.now()
    assert await engine.engine.retry(claim.lease, error="boom") == Ack.APPLIED
    assert (await fetch(engine, job.id)).run_at == now + 2 * SECOND


async def test_a_handlers_retry_after_keeps_its_delay_under_the_policys_budget(
    engine: EngineHandle,
) -> None:
    engine.policies.set_retry("flaky", RetryPolicy(max_attempts=1, backoff="linear"))
    job = await enqueue(engine, "flaky", max_attempts=5)
    claim = await claim_one(engine)
    await engine.engine.retry(claim.lease, error="later", delay=timedelta(seconds=42))
    assert (await fetch(engine, job.id)).state == JobState.Failed


async def test_rescues_use_the_kinds_policy_and_fall_back_without_one(
    engine: EngineHandle,
) -> None:
    engine.policies.set_retry("lost", RetryPolicy(backoff="linear", base=10, jitter=0))
    lost = await enqueue(engine, "lost")
    other = await enqueue(engine, "unregistered")
    await engine.engine.claim(QUEUE, limit=2)
    engine.clock.advance(120)
    now = engine.clock.now()
    rescued = await engine.engine.rescue_stale_heartbeats(staleness=timedelta(seconds=60))
    assert sorted(r.lease.job_id for r in rescued) == [lost.id, other.id]
    # linear from 10 s for attempt 1; the unregistered kind: awa-pg's 2^1 s
    assert (await fetch(engine, lost.id)).run_at == now + 10 * SECOND
    assert (await fetch(engine, other.id)).run_at == now + 2 * SECOND


async def test_a_rescue_exhausts_the_policys_budget(engine: EngineHandle) -> None:
    engine.policies.set_retry("lost", RetryPolicy(max_attempts=1))
    await enable_dlq(engine)
    job = await enqueue(engine, "lost", max_attempts=10)
    claim = await claim_one(engine, deadline=timedelta(seconds=5))
    engine.clock.advance(6)
    (rescued,) = await engine.engine.rescue_expired_deadlines()
    assert rescued.lease == claim.lease
    assert (rescued.new_state, rescued.dlq_reason) == (JobState.Failed, "max_attempts_exhausted")
    assert await engine.engine.get_job(job.id) is None
    assert (await engine.engine.get_dlq(job.id)) is not None


# ------------------------------------------------------------------ effects


def _release_or_cancel_child(job: JobRecord) -> Sequence[Effect]:
    """A parent's end moves its child (named in its args): a completion makes the
    waiting child available, a failure or cancel cancels it; a retry leaves it."""
    child = int(job.args["child"])
    at = job.finalized_at
    if at is None:
        return ()
    if job.state == JobState.Completed:
        return (ChangeJob(child, _release(at)),)
    return (ChangeJob(child, lifecycle.operator_cancel(at)),)


def _release(now: datetime) -> Transition:
    """A waiting (scheduled) job becomes available now."""
    return Transition(JobState.Available, applies_to=frozenset({JobState.Scheduled}), run_at=now)


async def _family(engine: EngineHandle, **parent: Any) -> tuple[JobRecord, JobRecord]:
    engine.policies.set_effects(PARENT, _release_or_cancel_child)
    child = await enqueue(
        engine, "child_step", queue=CHILD_QUEUE, run_at=engine.clock.now() + LATER
    )
    parent_job = await enqueue(engine, PARENT, args={"child": child.id}, **parent)
    return parent_job, child


async def test_a_completion_applies_its_effect_on_another_job(engine: EngineHandle) -> None:
    _parent, child = await _family(engine)
    claim = await claim_one(engine)
    engine.clock.advance(3)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    released = await fetch(engine, child.id)
    assert (released.state, released.run_at) == (JobState.Available, engine.clock.now())
    (claimed,) = await engine.engine.claim(CHILD_QUEUE, limit=5)
    assert claimed.job.id == child.id


async def test_a_completion_after_progress_applies_its_effect(engine: EngineHandle) -> None:
    """An attempt with mutable state (a heartbeat, progress) or a unique key completes by
    another path on queue storage; the effect goes with it there too."""
    _parent, child = await _family(engine, unique_key=b"parent-1")
    claim = await claim_one(engine)
    assert await engine.engine.heartbeat([claim.lease]) == [Ack.APPLIED]
    assert await engine.engine.update_progress(claim.lease, progress={"p": 1}) == Ack.APPLIED
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, child.id)).state == JobState.Available


async def test_a_stale_completion_applies_no_effect(engine: EngineHandle) -> None:
    _parent, child = await _family(engine)
    claim = await claim_one(engine)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    # The child ran and finished meanwhile: the same completion again is stale.
    (child_claim,) = await engine.engine.claim(CHILD_QUEUE, limit=5)
    assert await engine.engine.complete([child_claim.lease]) == [Ack.APPLIED]
    assert await engine.engine.complete([claim.lease]) == [Ack.STALE]
    assert (await fetch(engine, child.id)).state == JobState.Completed


async def test_an_effect_leaves_a_job_its_transition_does_not_apply_to(
    engine: EngineHandle,
) -> None:
    engine.policies.set_effects(PARENT, _release_or_cancel_child)
    child = await enqueue(engine, "child_step", queue=CHILD_QUEUE)  # available already
    parent = await enqueue(engine, PARENT, args={"child": child.id})
    claim = await claim_one(engine)
    assert claim.job.id == parent.id
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, child.id)).state == JobState.Available


async def test_a_retry_carries_no_effect_and_a_failure_does(engine: EngineHandle) -> None:
    _parent, child = await _family(engine)
    claim = await claim_one(engine)
    assert await engine.engine.retry(claim.lease, error="once") == Ack.APPLIED
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    engine.clock.advance(2)
    await engine.engine.promote_due()
    claim = await claim_one(engine)
    assert await engine.engine.fail(claim.lease, error="for good") == Ack.APPLIED
    assert (await fetch(engine, child.id)).state == JobState.Cancelled


async def test_a_rescue_that_fails_the_parent_applies_its_effect(engine: EngineHandle) -> None:
    engine.policies.set_effects(PARENT, _release_or_cancel_child)
    child = await enqueue(
        engine, "child_step", queue=CHILD_QUEUE, run_at=engine.clock.now() + LATER
    )
    await enqueue(engine, PARENT, args={"child": child.id}, max_attempts=1)
    await claim_one(engine, deadline=timedelta(seconds=5))
    engine.clock.advance(6)
    (rescued,) = await engine.engine.rescue_expired_deadlines()
    assert rescued.new_state == JobState.Failed
    assert (await fetch(engine, child.id)).state == JobState.Cancelled


async def test_a_callback_resolution_applies_the_effect(engine: EngineHandle) -> None:
    _parent, child = await _family(engine)
    claim = await claim_one(engine)
    await engine.engine.register_callback(
        claim.lease, callback_id="cb-effects", timeout=timedelta(minutes=5)
    )
    assert await engine.engine.wait_for_callback(claim.lease) == Ack.APPLIED
    assert (await fetch(engine, child.id)).state == JobState.Scheduled
    await engine.engine.resolve_callback("cb-effects", action="complete")
    assert (await fetch(engine, child.id)).state == JobState.Available


async def test_a_running_child_cancelled_by_an_effect_is_told(engine: EngineHandle) -> None:
    engine.policies.set_effects(PARENT, _release_or_cancel_child)
    child = await enqueue(engine, "child_step", queue=CHILD_QUEUE)
    (child_claim,) = await engine.engine.claim(CHILD_QUEUE, limit=1)
    await enqueue(engine, PARENT, args={"child": child.id})
    claim = await claim_one(engine)
    subscription = await engine.notifier.subscribe(["awa:cancel"])
    try:
        await subscription.wait(0.05)
        assert await engine.engine.cancel_attempt(claim.lease, reason="stop") == Ack.APPLIED
        # Woken by the notice (the wait returns as soon as it arrives).
        fired: set[str] = set()
        for _ in range(20):
            fired |= await subscription.wait(0.25)
            if fired:
                break
        assert fired == {"awa:cancel"}
        assert (await fetch(engine, child.id)).state == JobState.Cancelled
        assert await engine.engine.complete([child_claim.lease]) == [Ack.STALE]
    finally:
        await subscription.close()
