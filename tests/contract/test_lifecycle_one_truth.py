"""One truth: every engine applies the transitions ``awa.domain.lifecycle`` decides.

Each test changes a rule inside the domain module only (a reason string, the exhaustion
rule, the error-entry shape, the retry decision) and shows that every engine, SQL ones
included, follows: no engine keeps a copy of the rule.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from awa.domain import lifecycle
from awa.domain.kind_policies import KindPolicies
from awa.domain.lifecycle import AttemptFacts, ErrorEntry, Rescue, Transition
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack, Rescued
from tests.contract._support import SECOND, claim_one, enable_dlq, enqueue, fetch
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

STALENESS = timedelta(seconds=30)


async def test_rescue_reason_and_exhaustion_come_from_the_domain(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    patched = {**lifecycle.RESCUE_ERRORS, Rescue.HEARTBEAT_STALE: "no pulse (domain rule)"}
    monkeypatch.setattr(lifecycle, "RESCUE_ERRORS", patched)
    # Every attempt is the last one: the first rescue fails the job although it has 25.
    monkeypatch.setattr(lifecycle, "attempts_exhausted", lambda attempt, max_attempts: True)
    await enable_dlq(engine)
    job = await enqueue(engine)
    claim = await claim_one(engine)
    engine.clock.advance(STALENESS + SECOND)

    rescued = await engine.engine.rescue_stale_heartbeats(staleness=STALENESS)

    assert rescued == [
        Rescued(
            claim.lease,
            JobState.Failed,
            "no pulse (domain rule)",
            dlq_reason="max_attempts_exhausted",
            queue=job.queue,
            kind=job.kind,
        )
    ]
    assert await engine.engine.get_job(job.id) is None
    entry = await engine.engine.get_dlq(job.id)
    assert entry is not None and entry.reason == "max_attempts_exhausted"
    assert entry.job.attempt == 1 and entry.job.max_attempts == 25
    assert entry.job.errors[-1]["error"] == "no pulse (domain rule)"


async def test_error_entry_shape_comes_from_the_domain(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ErrorEntry.as_dict

    def tagged(self: ErrorEntry) -> dict[str, Any]:
        return {**original(self), "shape": "domain"}

    monkeypatch.setattr(ErrorEntry, "as_dict", tagged)
    first = await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.retry(claim.lease, error="boom") is Ack.APPLIED
    second = await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.fail(claim.lease, error="fatal") is Ack.APPLIED
    third = await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.release(claim.lease, error="bye") is Ack.APPLIED

    now = engine.clock.now().isoformat()
    assert (await fetch(engine, first.id)).errors[-1] == {
        "error": "boom",
        "attempt": 1,
        "at": now,
        "shape": "domain",
    }
    assert (await fetch(engine, second.id)).errors[-1] == {
        "error": "fatal",
        "attempt": 1,
        "at": now,
        "terminal": True,
        "shape": "domain",
    }
    assert (await fetch(engine, third.id)).errors[-1]["shape"] == "domain"


async def test_the_retry_decision_is_the_domains(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    def decided(
        facts: AttemptFacts,
        *,
        error: str,
        now: datetime,
        backoff: Backoff,
        policies: KindPolicies | None = None,
        delay: timedelta | None = None,
    ) -> Transition:
        # A different rule: a fixed seven-second pause that gives the attempt back.
        return Transition(
            JobState.Retryable,
            run_at=now + 7 * SECOND,
            attempt=lifecycle.AttemptChange.GIVE_BACK,
            error=ErrorEntry(f"{error} (decided)", facts.attempt, now),
        )

    monkeypatch.setattr(lifecycle, "retry", decided)
    job = await enqueue(engine)
    claim = await claim_one(engine)
    assert await engine.engine.retry(claim.lease, error="boom") is Ack.APPLIED

    retried = await fetch(engine, job.id)
    assert retried.state == JobState.Retryable
    assert retried.run_at == engine.clock.now() + 7 * SECOND
    assert retried.attempt == 0
    assert retried.errors[-1]["error"] == "boom (decided)"
