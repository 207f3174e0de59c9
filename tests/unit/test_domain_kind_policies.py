"""Per-kind policies: ``RetryPolicy`` values and checks, the registry, and how the
lifecycle reads both (retry, rescue, effects)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa.domain import lifecycle
from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.kind_policies import ChangeJob, KindPolicies
from awa.domain.lifecycle import AttemptFacts, DlqReason, Rescue
from awa.domain.policies import Backoff, BackoffShape, RetryPolicy
from awa.domain.states import JobState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EXACT = Backoff(jitter=lambda: 0.0)
FULL = Backoff(jitter=lambda: 1.0)


def _constant(draw: float) -> Callable[[], float]:
    return lambda: draw


def _seconds(delay: timedelta) -> float:
    return delay.total_seconds()


def test_the_default_policy_is_awa_pgs_backoff() -> None:
    policy = RetryPolicy()
    for attempt in range(0, 25):
        for draw in (0.0, 0.3, 1.0):
            assert policy.delay(attempt, draw) == Backoff(jitter=_constant(draw)).delay(attempt)
    assert policy.max_attempts is None and policy.budget(25) == 25


@pytest.mark.parametrize(
    ("shape", "expected"),
    [("exponential", [2, 4, 8, 16]), ("linear", [3, 6, 9, 12]), ("constant", [3, 3, 3, 3])],
)
def test_shapes_grow_as_named(shape: str, expected: list[int]) -> None:
    base = 3 if shape != "exponential" else 1
    policy = RetryPolicy(backoff=shape, base=base, jitter=0)
    assert [_seconds(policy.delay(n, 0.9)) for n in (1, 2, 3, 4)] == expected
    assert policy.backoff is BackoffShape(shape)


def test_jitter_and_max_delay_bound_the_delay() -> None:
    policy = RetryPolicy(backoff="constant", base=timedelta(seconds=10), jitter=0.5, max_delay=12)
    assert _seconds(policy.delay(1, 0.0)) == 10
    assert _seconds(policy.delay(1, 0.2)) == 11
    assert _seconds(policy.delay(1, 1.0)) == 12  # 15 capped


def test_a_callable_backoff_and_its_fallback() -> None:
    policy = RetryPolicy(backoff=lambda n: timedelta(minutes=n), jitter=0)
    assert _seconds(policy.delay(2, 0.0)) == 120
    assert _seconds(RetryPolicy(backoff=lambda n: 7.5, jitter=0).delay(1, 0.0)) == 7.5

    def broken(n: int) -> float:
        raise RuntimeError("bug in user code")

    bad_ones: list[Callable[[int], Any]] = [
        broken,
        lambda n: -1,
        lambda n: math.nan,
        lambda n: "soon",
    ]
    for bad in bad_ones:
        # The exponential delay for the attempt, as documented.
        assert _seconds(RetryPolicy(backoff=bad, jitter=0).delay(3, 0.0)) == 8


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"backoff": "fibonacci"}, "backoff"),
        ({"backoff": 3}, "backoff"),
        ({"jitter": -0.1}, "jitter"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": math.nan}, "jitter"),
        ({"jitter": "a lot"}, "jitter"),
        ({"max_delay": 0}, "max_delay"),
        ({"max_delay": math.inf}, "max_delay"),
        ({"max_delay": timedelta(days=-1)}, "max_delay"),
        ({"max_delay": "1h"}, "max_delay"),
        ({"base": 0}, "base"),
        ({"base": math.nan}, "base"),
        ({"base": 10 * 365 * 24 * 3600 + 1}, "base"),
    ],
)
def test_bad_values_are_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        RetryPolicy(**kwargs)
    assert refused.value.field == field


def test_the_registry_keeps_each_part_per_kind() -> None:
    policies = KindPolicies()
    retry = RetryPolicy(max_attempts=3)
    policies.set_retry("a", retry)
    policies.set_effects("a", lambda job: ())
    assert policies.retry_for("a") is retry and policies.has_effects
    policies.set_retry("a", None)
    assert policies.retry_for("a") is None and policies.effects_for("a") is not None
    policies.set_effects("a", None)
    assert not policies.has_effects and dict(policies.kinds()) == {}
    assert policies.retry_for("never") is None and policies.retry_for(None) is None


def test_the_registry_refuses_what_is_not_a_policy() -> None:
    policies = KindPolicies()
    with pytest.raises(TypeError):
        policies.set_retry("a", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        policies.set_effects("a", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        policies.set_retry("", RetryPolicy())


def test_the_lifecycle_reads_the_kinds_policy_for_retry_and_rescue() -> None:
    policies = KindPolicies()
    policies.set_retry("k", RetryPolicy(max_attempts=2, backoff="linear", base=5, jitter=0))
    facts = AttemptFacts(1, 25, kind="k")
    t = lifecycle.retry(facts, error="e", now=NOW, backoff=FULL, policies=policies)
    assert (t.state, t.run_at) == (JobState.Retryable, NOW + timedelta(seconds=5))
    last = AttemptFacts(2, 25, dlq_enabled=True, kind="k")
    t = lifecycle.retry(last, error="e", now=NOW, backoff=EXACT, policies=policies)
    assert (t.state, t.dlq_reason) == (JobState.Failed, DlqReason.MAX_ATTEMPTS_EXHAUSTED)
    t = lifecycle.rescue(Rescue.HEARTBEAT_STALE, facts, now=NOW, backoff=EXACT, policies=policies)
    assert t.run_at == NOW + timedelta(seconds=5)
    # Another kind, or no registry: the default backoff and the job's budget.
    other = AttemptFacts(2, 25, kind="other")
    t = lifecycle.rescue(Rescue.HEARTBEAT_STALE, other, now=NOW, backoff=EXACT, policies=policies)
    assert t.run_at == NOW + timedelta(seconds=4)
    t = lifecycle.retry(last, error="e", now=NOW, backoff=EXACT)
    assert t.run_at == NOW + timedelta(seconds=4)


def _job(job_id: int, kind: str, state: JobState) -> JobRecord:
    return JobRecord(
        id=job_id, kind=kind, queue="q", args={}, state=state, priority=2, attempt=1,
        max_attempts=25, run_at=NOW, created_at=NOW, finalized_at=NOW,
    )  # fmt: skip


def test_effects_come_from_the_kinds_rule_and_never_name_the_job_itself() -> None:
    policies = KindPolicies()
    cancel = lifecycle.operator_cancel(NOW)
    policies.set_effects("parent", lambda job: (ChangeJob(job.id + 1, cancel),))
    assert lifecycle.effects(policies, _job(7, "parent", JobState.Failed)) == (
        ChangeJob(8, cancel),
    )
    assert lifecycle.effects(policies, _job(7, "other", JobState.Failed)) == ()
    assert lifecycle.effects(None, _job(7, "parent", JobState.Failed)) == ()
    policies.set_effects("parent", lambda job: (ChangeJob(job.id, cancel),))
    with pytest.raises(ValueError, match="itself"):
        lifecycle.effects(policies, _job(7, "parent", JobState.Failed))


def test_an_attempt_ends_when_the_job_leaves_the_live_states() -> None:
    assert lifecycle.ended_attempt(JobState.Running, JobState.Completed)
    assert lifecycle.ended_attempt(JobState.WaitingExternal, JobState.Retryable)
    assert not lifecycle.ended_attempt(JobState.Running, JobState.WaitingExternal)
    assert not lifecycle.ended_attempt(JobState.WaitingExternal, JobState.Running)
    assert not lifecycle.ended_attempt(JobState.Scheduled, JobState.Cancelled)
