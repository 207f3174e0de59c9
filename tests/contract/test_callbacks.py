"""External callbacks: register, wait, resolve with each action, heartbeat and timeout."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.callbacks import CallbackExpressions
from awa.domain.errors import CallbackNotFound, ValidationError
from awa.domain.job import Claim
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import (
    QUEUE,
    SECOND,
    claim_one,
    enable_dlq,
    enqueue,
    fetch,
    rescued_as,
)
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

TIMEOUT = timedelta(minutes=10)


async def _waiting(engine: EngineHandle, callback_id: str, max_attempts: int = 25) -> Claim:
    await enqueue(engine, max_attempts=max_attempts)
    claim = await claim_one(engine)
    assert (
        await engine.engine.register_callback(claim.lease, callback_id=callback_id, timeout=TIMEOUT)
        == Ack.APPLIED
    )
    assert await engine.engine.wait_for_callback(claim.lease) == Ack.APPLIED
    return claim


async def test_register_and_wait(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    now = engine.clock.now()
    await engine.engine.register_callback(claim.lease, callback_id="cb-1", timeout=TIMEOUT)
    registered = await fetch(engine, claim.job.id)
    assert registered.state == JobState.Running
    assert (registered.callback_id, registered.callback_timeout_at) == ("cb-1", now + TIMEOUT)
    assert await engine.engine.wait_for_callback(claim.lease) == Ack.APPLIED
    assert (await fetch(engine, claim.job.id)).state == JobState.WaitingExternal


async def test_wait_without_registration_is_stale(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.wait_for_callback(claim.lease) == Ack.STALE
    assert (await fetch(engine, claim.job.id)).state == JobState.Running


async def test_resolve_complete(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-complete")
    engine.clock.advance(3)
    job = await engine.engine.resolve_callback("cb-complete", action="complete")
    assert job.state == JobState.Completed and job.finalized_at == engine.clock.now()
    assert (job.callback_id, job.callback_timeout_at) == (None, None)
    assert await fetch(engine, claim.job.id) == job
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-complete", action="complete")


async def test_resolve_fail(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-fail", max_attempts=5)
    job = await engine.engine.resolve_callback("cb-fail", action="fail", error="rejected")
    assert job.state == JobState.Failed and job.callback_id is None
    assert job.errors[-1]["error"] == "rejected" and job.errors[-1]["terminal"] is True
    assert await fetch(engine, claim.job.id) == job


async def test_resolve_fail_default_message_and_dlq(engine: EngineHandle) -> None:
    await enable_dlq(engine)
    claim = await _waiting(engine, "cb-dlq")
    job = await engine.engine.resolve_callback("cb-dlq", action="fail")
    assert job.state == JobState.Failed and job.errors[-1]["error"] == "callback failed"
    entry = await engine.engine.get_dlq(claim.job.id)
    assert entry is not None and entry.reason == "callback_failed"
    assert await engine.engine.get_job(claim.job.id) is None


async def test_resolve_retry_starts_the_job_afresh(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-retry")
    job = await engine.engine.resolve_callback("cb-retry", action="retry")
    assert job.state == JobState.Available and job.run_at == engine.clock.now()
    assert job.attempt == 0 and job.errors == ()
    assert job.callback_id is None and job.callback_timeout_at is None
    assert await fetch(engine, claim.job.id) == job
    with pytest.raises(CallbackNotFound, match="callback not found: cb-retry"):
        await engine.engine.resolve_callback("cb-retry", action="retry")
    again = await claim_one(engine)
    assert again.job.id == claim.job.id and again.job.attempt == 1
    assert again.job.run_lease == claim.job.run_lease + 1
    assert await engine.engine.complete([claim.lease]) == [Ack.STALE]


async def test_operator_retry_of_a_waiting_job_ends_its_callback(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-admin")
    job = await engine.engine.retry_job(claim.job.id)
    assert job is not None and job.state == JobState.Available and job.attempt == 0
    assert job.callback_id is None
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-admin", action="complete")
    with pytest.raises(CallbackNotFound):
        await engine.engine.heartbeat_callback("cb-admin", timeout=TIMEOUT)
    assert (await claim_one(engine)).job.id == claim.job.id


async def test_resolve_resume_stores_the_payload(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-resume")
    engine.clock.advance(4)
    job = await engine.engine.resolve_callback("cb-resume", action="resume", payload={"ok": True})
    assert job.state == JobState.Running and job.heartbeat_at == engine.clock.now()
    assert job.metadata["_awa_callback_result"] == {"ok": True}
    # The callback ends with the resume: the token no longer resolves or heartbeats.
    assert job.callback_id is None and job.callback_timeout_at is None
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-resume", action="resume", payload={})
    with pytest.raises(CallbackNotFound):
        await engine.engine.heartbeat_callback("cb-resume", timeout=TIMEOUT)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]


async def test_resolve_a_still_running_attempt(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.register_callback(claim.lease, callback_id="cb-early", timeout=TIMEOUT)
    job = await engine.engine.resolve_callback("cb-early", action="complete")
    assert job.state == JobState.Completed


async def test_unknown_callback_and_unknown_action(engine: EngineHandle) -> None:
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("missing", action="complete")
    with pytest.raises(CallbackNotFound):
        await engine.engine.heartbeat_callback("missing", timeout=TIMEOUT)
    claim = await _waiting(engine, "cb-action")
    with pytest.raises(ValidationError):
        await engine.engine.resolve_callback("cb-action", action="explode")
    assert (await fetch(engine, claim.job.id)).state == JobState.WaitingExternal


async def test_heartbeat_callback_pushes_the_timeout(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-hb")
    engine.clock.advance(TIMEOUT - SECOND)
    job = await engine.engine.heartbeat_callback("cb-hb", timeout=TIMEOUT)
    assert job.callback_timeout_at == engine.clock.now() + TIMEOUT
    engine.clock.advance(2)
    assert await engine.engine.rescue_expired_callbacks() == []
    assert (await fetch(engine, claim.job.id)).state == JobState.WaitingExternal


async def test_callback_timeout_is_rescued_as_a_retry(engine: EngineHandle) -> None:
    claim = await _waiting(engine, "cb-timeout")
    engine.clock.advance(TIMEOUT)
    rescued = await engine.engine.rescue_expired_callbacks()
    assert rescued == [rescued_as(claim, JobState.Retryable, "callback timed out")]
    job = await fetch(engine, claim.job.id)
    assert job.state == JobState.Retryable and job.callback_id is None
    assert job.errors[-1]["error"] == "callback timed out"
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-timeout", action="complete")
    with pytest.raises(CallbackNotFound):
        await engine.engine.heartbeat_callback("cb-timeout", timeout=TIMEOUT)
    # The next attempt's callback is its own; the stale token still does not resolve it.
    await engine.engine.promote_due()
    engine.clock.advance(60)
    await engine.engine.promote_due()
    retried = await claim_one(engine)
    await engine.engine.register_callback(retried.lease, callback_id="cb-next", timeout=TIMEOUT)
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-timeout", action="complete")
    assert (await fetch(engine, claim.job.id)).state == JobState.Running


async def test_exhausted_callback_timeout_fails_or_dlqs(engine: EngineHandle) -> None:
    plain = await _waiting(engine, "cb-plain", max_attempts=1)
    await enable_dlq(engine, "held")
    await enqueue(engine, queue="held", max_attempts=1)
    held = await claim_one(engine, "held")
    await engine.engine.register_callback(held.lease, callback_id="cb-held", timeout=TIMEOUT)
    await engine.engine.wait_for_callback(held.lease)
    engine.clock.advance(TIMEOUT + SECOND)
    rescued = await engine.engine.rescue_expired_callbacks()
    assert rescued == [
        rescued_as(plain, JobState.Failed, "callback timed out"),
        rescued_as(held, JobState.Failed, "callback timed out", "callback_timeout"),
    ]
    assert (await fetch(engine, plain.job.id)).state == JobState.Failed
    entry = await engine.engine.get_dlq(held.job.id)
    assert entry is not None and entry.reason == "callback_timeout"
    assert await engine.engine.claim(QUEUE, limit=1) == []


async def test_registered_expressions_are_read_back_while_the_callback_lives(
    engine: EngineHandle,
) -> None:
    exprs = CallbackExpressions(on_complete="payload.ok == true", transform="payload.value")
    await enqueue(engine)
    claim = await claim_one(engine)
    assert (
        await engine.engine.register_callback(
            claim.lease, callback_id="cb-cel", timeout=TIMEOUT, expressions=exprs
        )
        == Ack.APPLIED
    )
    await engine.engine.wait_for_callback(claim.lease)
    assert await engine.engine.callback_expressions("cb-cel") == exprs
    await engine.engine.resolve_callback("cb-cel", action="complete")
    with pytest.raises(CallbackNotFound):
        await engine.engine.callback_expressions("cb-cel")
    plain = await _waiting(engine, "cb-plain")
    assert await engine.engine.callback_expressions("cb-plain") is None
    assert plain.job.id != claim.job.id
    with pytest.raises(CallbackNotFound):
        await engine.engine.callback_expressions("cb-missing")


async def test_a_registration_replaces_the_expressions_a_callback_id_had(
    engine: EngineHandle,
) -> None:
    """The expressions read back are those of the live attempt's last registration: a
    callback id an ended attempt used before carries the new attempt's expressions, and
    registering again replaces them (with none as well), also after a change of id."""
    first = CallbackExpressions(filter="payload.ok")
    second = CallbackExpressions(on_fail="payload.error != ''")
    await enqueue(engine)
    ended = await claim_one(engine)
    register = engine.engine.register_callback
    await register(ended.lease, callback_id="cb-reused", timeout=TIMEOUT, expressions=first)
    await engine.engine.cancel_job(ended.job.id)
    await enqueue(engine)
    claim = await claim_one(engine)
    await register(claim.lease, callback_id="cb-reused", timeout=TIMEOUT, expressions=second)
    assert await engine.engine.callback_expressions("cb-reused") == second
    await register(claim.lease, callback_id="cb-reused", timeout=TIMEOUT)
    assert await engine.engine.callback_expressions("cb-reused") is None
    await register(claim.lease, callback_id="cb-reused", timeout=TIMEOUT, expressions=first)
    await register(claim.lease, callback_id="cb-other", timeout=TIMEOUT)
    await register(claim.lease, callback_id="cb-reused", timeout=TIMEOUT)
    assert await engine.engine.callback_expressions("cb-reused") is None


async def _release(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.wait_for_callback(claim.lease)
    await engine.engine.release(claim.lease, error="shutdown")


async def _retry(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.wait_for_callback(claim.lease)
    await engine.engine.retry(claim.lease, error="again", delay=timedelta(0))


async def _snooze(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.snooze(claim.lease, delay=timedelta(0))


async def _heartbeat_rescue(engine: EngineHandle, claim: Claim) -> None:
    engine.clock.advance(timedelta(minutes=5))
    assert len(await engine.engine.rescue_stale_heartbeats(staleness=timedelta(minutes=1))) == 1
    engine.clock.advance(timedelta(minutes=5))


async def _fail_then_operator_retry(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.wait_for_callback(claim.lease)
    await engine.engine.fail(claim.lease, error="fatal")
    await engine.engine.retry_job(claim.job.id)


async def _cancel_then_operator_retry(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.cancel_attempt(claim.lease, reason="no")
    await engine.engine.retry_job(claim.job.id)


async def _dlq_then_retry_from_dlq(engine: EngineHandle, claim: Claim) -> None:
    await engine.engine.wait_for_callback(claim.lease)
    await engine.engine.fail(claim.lease, error="fatal")
    assert await engine.engine.retry_from_dlq(claim.job.id) is not None


ATTEMPT_ENDINGS = {
    "release": _release,
    "retry": _retry,
    "snooze": _snooze,
    "heartbeat_rescue": _heartbeat_rescue,
    "fail_then_operator_retry": _fail_then_operator_retry,
    "cancel_then_operator_retry": _cancel_then_operator_retry,
    "dlq_then_retry_from_dlq": _dlq_then_retry_from_dlq,
}


@pytest.mark.parametrize("ending", sorted(ATTEMPT_ENDINGS))
async def test_the_token_of_an_ended_attempt_does_not_resolve_the_next_one(
    engine: EngineHandle, ending: str
) -> None:
    """A callback belongs to the attempt that registered it: once that attempt ends, its
    token neither resolves, heartbeats nor reads the job's next attempt."""
    await enable_dlq(engine, "held")
    await enqueue(engine, queue="held" if ending.startswith("dlq") else QUEUE)
    claim = await claim_one(engine, "held" if ending.startswith("dlq") else QUEUE)
    exprs = CallbackExpressions(on_complete="payload.ok")
    await engine.engine.register_callback(
        claim.lease, callback_id="cb-ended", timeout=TIMEOUT, expressions=exprs
    )
    await ATTEMPT_ENDINGS[ending](engine, claim)
    await engine.engine.promote_due()
    after = await claim_one(engine, claim.job.queue)
    assert after.job.id == claim.job.id
    assert after.job.callback_id is None and after.job.callback_timeout_at is None
    with pytest.raises(CallbackNotFound):
        await engine.engine.callback_expressions("cb-ended")
    with pytest.raises(CallbackNotFound):
        await engine.engine.heartbeat_callback("cb-ended", timeout=TIMEOUT)
    with pytest.raises(CallbackNotFound):
        await engine.engine.resolve_callback("cb-ended", action="complete")
    assert (await fetch(engine, claim.job.id)).state == JobState.Running
