"""The job lifecycle: every outcome's transition, decided without I/O or a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from awa.domain.callbacks import CALLBACK_ACTIONS, CallbackAction, check_action
from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.lifecycle import (
    CALLBACK_RESULT_KEY,
    DEFAULT_CALLBACK_ERROR,
    HANDLER_STATES,
    RETRYABLE_TERMINAL_STATES,
    AttemptChange,
    AttemptFacts,
    DlqReason,
    ErrorEntry,
    Rescue,
    Transition,
    attempts_exhausted,
    callback_complete,
    callback_fail,
    callback_heartbeat,
    callback_resolution,
    callback_resume,
    callback_retry,
    cancel,
    complete,
    drain,
    error_entry,
    fail,
    operator_cancel,
    operator_retry,
    operator_retry_applies,
    release,
    rescue,
    retry,
    snooze,
)
from awa.domain.policies import Backoff
from awa.domain.states import (
    LIVE_STATES,
    PENDING_STATES,
    TERMINAL_STATES,
    JobState,
    is_legal_transition,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
EXACT = Backoff(jitter=lambda: 0.0)
S = JobState


def _job(state: JobState = S.Running) -> JobRecord:
    return JobRecord(
        id=7,
        kind="k",
        queue="q",
        args={},
        state=state,
        priority=2,
        attempt=3,
        max_attempts=5,
        run_at=NOW - timedelta(minutes=1),
        created_at=NOW - timedelta(hours=1),
        heartbeat_at=NOW - timedelta(seconds=5),
        errors=({"error": "old", "attempt": 2, "at": "x"},),
        metadata={"keep": 1},
        callback_id="cb-1",
        callback_timeout_at=NOW + timedelta(minutes=5),
        run_lease=9,
        progress={"pct": 50},
    )


MID = AttemptFacts(attempt=3, max_attempts=5)
LAST = AttemptFacts(attempt=5, max_attempts=5)
LAST_DLQ = AttemptFacts(attempt=5, max_attempts=5, dlq_enabled=True)


# ------------------------------------------------------------------ values


def test_error_entry_shape_is_one_dict() -> None:
    assert ErrorEntry("boom", 2, NOW).as_dict() == {
        "error": "boom",
        "attempt": 2,
        "at": "2030-01-01T12:00:00+00:00",
    }
    assert ErrorEntry("boom", 2, NOW, terminal=True, expression="p.x").as_dict() == {
        "error": "boom",
        "attempt": 2,
        "at": "2030-01-01T12:00:00+00:00",
        "terminal": True,
        "expression": "p.x",
    }
    assert error_entry("boom", attempt=2, at=NOW, terminal=True) == (
        ErrorEntry("boom", 2, NOW, terminal=True).as_dict()
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [(AttemptChange.KEEP, 4), (AttemptChange.GIVE_BACK, 3), (AttemptChange.RESET, 0)],
)
def test_attempt_change(change: AttemptChange, expected: int) -> None:
    assert change.after(4) == expected


def test_attempts_exhausted_at_the_budget() -> None:
    assert not attempts_exhausted(4, 5)
    assert attempts_exhausted(5, 5)
    assert attempts_exhausted(6, 5)


def test_facts_of_a_job() -> None:
    job = _job()
    assert AttemptFacts.of(job, dlq_enabled=True) == AttemptFacts(3, 5, True, job.kind)


def test_dlq_reasons_are_the_stored_strings() -> None:
    assert {str(r) for r in DlqReason} == {
        "max_attempts_exhausted",
        "terminal_error",
        "callback_failed",
        "callback_timeout",
        "dependency_failed",
    }


# ------------------------------------------------------------------ handler outcomes


def test_complete() -> None:
    t = complete(NOW)
    assert t.applies_to == LIVE_STATES
    done = t.apply(_job())
    assert done.state == S.Completed
    assert done.finalized_at == NOW
    assert done.progress is None
    assert done.errors == _job().errors
    assert done.callback_id is None and done.callback_timeout_at is None
    assert t.dlq_reason is None


def test_retry_uses_backoff_for_the_attempt() -> None:
    t = retry(MID, error="boom", now=NOW, backoff=EXACT)
    assert t.state == S.Retryable and t.applies_to == LIVE_STATES
    assert t.run_at == NOW + timedelta(seconds=8)  # 2^3
    assert t.error == ErrorEntry("boom", 3, NOW)
    retried = t.apply(_job())
    assert retried.errors[-1] == {"error": "boom", "attempt": 3, "at": NOW.isoformat()}
    assert len(retried.errors) == 2
    assert retried.attempt == 3
    assert retried.progress == {"pct": 50}  # progress is kept
    assert t.finalized_at is None and t.dlq_reason is None


def test_retry_with_explicit_delay() -> None:
    t = retry(MID, error="boom", now=NOW, backoff=EXACT, delay=timedelta(seconds=1))
    assert t.run_at == NOW + timedelta(seconds=1)


def test_retry_exhausted_fails_without_dlq() -> None:
    t = retry(LAST, error="boom", now=NOW, backoff=EXACT)
    assert t.state == S.Failed
    assert t.finalized_at == NOW and t.run_at is None
    # The last attempt's error ends the job: marked terminal, as awa-pg marks it.
    assert t.error == ErrorEntry("boom", 5, NOW, terminal=True)
    assert t.dlq_reason is None


def test_retry_exhausted_routes_to_dlq_when_enabled() -> None:
    t = retry(LAST_DLQ, error="boom", now=NOW, backoff=EXACT)
    assert t.state == S.Failed
    assert t.dlq_reason is DlqReason.MAX_ATTEMPTS_EXHAUSTED


def test_fail() -> None:
    t = fail(MID, error="fatal", now=NOW)
    assert t.state == S.Failed and t.applies_to == LIVE_STATES
    assert t.error == ErrorEntry("fatal", 3, NOW, terminal=True)
    assert t.finalized_at == NOW
    assert t.dlq_reason is None
    assert fail(attrs.evolve(MID, dlq_enabled=True), error="x", now=NOW).dlq_reason is (
        DlqReason.TERMINAL_ERROR
    )


def test_snooze_gives_the_attempt_back() -> None:
    t = snooze(delay=timedelta(seconds=30), now=NOW)
    assert t.applies_to == HANDLER_STATES
    assert not t.applies(S.WaitingExternal)
    snoozed = t.apply(_job())
    assert snoozed.state == S.Scheduled
    assert snoozed.run_at == NOW + timedelta(seconds=30)
    assert snoozed.attempt == 2
    assert snoozed.errors == _job().errors
    assert t.error is None and t.finalized_at is None


def test_release_records_the_running_attempt() -> None:
    t = release(MID, error="shutting down", now=NOW)
    released = t.apply(_job())
    assert released.state == S.Retryable
    assert released.run_at == NOW
    assert released.attempt == 2
    assert released.errors[-1] == ErrorEntry("shutting down", 3, NOW).as_dict()
    assert t.applies_to == LIVE_STATES


def test_cancel() -> None:
    t = cancel(NOW)
    assert t.applies_to == LIVE_STATES
    cancelled = t.apply(_job())
    assert cancelled.state == S.Cancelled and cancelled.finalized_at == NOW
    assert cancelled.errors == _job().errors


def test_operator_cancel_and_drain() -> None:
    assert operator_cancel(NOW).applies_to == frozenset(JobState) - TERMINAL_STATES
    assert drain(NOW).applies_to == PENDING_STATES
    assert not drain(NOW).applies(S.Running)
    for t in (operator_cancel(NOW), drain(NOW)):
        cancelled = t.apply(_job(S.Scheduled))
        assert cancelled.state == S.Cancelled and cancelled.finalized_at == NOW


# ------------------------------------------------------------------ operator retry


@pytest.mark.parametrize("state", [S.Failed, S.Cancelled])
def test_operator_retry_of_a_failed_or_cancelled_job_starts_over(state: JobState) -> None:
    t = operator_retry(state, NOW)
    assert t is not None and t.applies_to == RETRYABLE_TERMINAL_STATES
    assert operator_retry_applies(state)
    finished = attrs.evolve(_job(state), finalized_at=NOW - timedelta(hours=1))
    retried = t.apply(finished)
    assert retried.state == S.Available and retried.run_at == NOW
    assert retried.attempt == 0 and retried.finalized_at is None
    assert retried.errors == finished.errors


def test_operator_retry_of_a_waiting_job_is_retry_external() -> None:
    assert operator_retry(S.WaitingExternal, NOW) == callback_retry(NOW)


@pytest.mark.parametrize("state", [S.Running, S.Available, S.Completed, S.Scheduled, S.Retryable])
def test_operator_retry_leaves_jobs_that_are_on_their_way_or_succeeded(state: JobState) -> None:
    # awa-pg 0.6.9 refuses them all ("job not found"), deferred ones included.
    assert operator_retry(state, NOW) is None
    assert not operator_retry_applies(state)


# ------------------------------------------------------------------ callbacks


def test_callback_complete_ends_the_callback() -> None:
    done = callback_complete(NOW).apply(_job(S.WaitingExternal))
    assert done.state == S.Completed and done.finalized_at == NOW
    assert done.progress is None
    assert done.callback_id is None and done.callback_timeout_at is None


def test_callback_fail() -> None:
    t = callback_fail(MID, error=None, now=NOW)
    assert t.error == ErrorEntry(DEFAULT_CALLBACK_ERROR, 3, NOW, terminal=True)
    failed = t.apply(_job(S.WaitingExternal))
    assert failed.state == S.Failed and failed.finalized_at == NOW
    assert failed.callback_id is None and failed.callback_timeout_at is None
    assert t.dlq_reason is None
    matched = callback_fail(
        attrs.evolve(MID, dlq_enabled=True), error="bad", now=NOW, expression="payload.x"
    )
    assert matched.error is not None and matched.error.as_dict()["expression"] == "payload.x"
    assert matched.dlq_reason is DlqReason.CALLBACK_FAILED


def test_callback_retry_is_a_fresh_start() -> None:
    t = callback_retry(NOW)
    retried = t.apply(_job(S.WaitingExternal))
    assert retried.state == S.Available and retried.run_at == NOW
    assert retried.attempt == 0
    assert retried.errors == _job().errors
    assert retried.callback_id is None and retried.callback_timeout_at is None


def test_callback_resume_merges_the_payload() -> None:
    resumed = callback_resume({"ok": True}, NOW).apply(_job(S.WaitingExternal))
    assert resumed.state == S.Running
    assert resumed.heartbeat_at == NOW
    assert resumed.metadata == {"keep": 1, CALLBACK_RESULT_KEY: {"ok": True}}
    assert resumed.callback_id is None and resumed.callback_timeout_at is None
    assert resumed.attempt == 3


@pytest.mark.parametrize("state", [S.Running, S.WaitingExternal])
def test_callback_heartbeat_keeps_the_state(state: JobState) -> None:
    t = callback_heartbeat(timeout=timedelta(minutes=2), now=NOW)
    assert t.state is None and t.target(state) == state
    beat = t.apply(_job(state))
    assert beat.state == state
    assert beat.callback_timeout_at == NOW + timedelta(minutes=2)
    assert beat.callback_id == "cb-1"


# ------------------------------------------------------------------ rescue


@pytest.mark.parametrize(
    ("kind", "error", "state"),
    [
        (Rescue.HEARTBEAT_STALE, "heartbeat stale", S.Running),
        (Rescue.DEADLINE_EXCEEDED, "deadline exceeded", S.Running),
        (Rescue.CALLBACK_TIMEOUT, "callback timed out", S.WaitingExternal),
    ],
)
def test_rescue_retries_with_backoff(kind: Rescue, error: str, state: JobState) -> None:
    t = rescue(kind, MID, now=NOW, backoff=EXACT)
    assert kind.error == error
    assert t.applies_to == frozenset({state})
    assert t.state == S.Retryable and t.run_at == NOW + timedelta(seconds=8)
    assert t.error == ErrorEntry(error, 3, NOW)
    rescued = t.apply(_job(state))
    assert rescued.callback_id is None and rescued.callback_timeout_at is None


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (Rescue.HEARTBEAT_STALE, DlqReason.MAX_ATTEMPTS_EXHAUSTED),
        (Rescue.DEADLINE_EXCEEDED, DlqReason.MAX_ATTEMPTS_EXHAUSTED),
        (Rescue.CALLBACK_TIMEOUT, DlqReason.CALLBACK_TIMEOUT),
    ],
)
def test_rescue_of_the_last_attempt(kind: Rescue, reason: DlqReason) -> None:
    failed = rescue(kind, LAST, now=NOW, backoff=EXACT)
    assert failed.state == S.Failed and failed.dlq_reason is None
    assert failed.finalized_at == NOW
    routed = rescue(kind, LAST_DLQ, now=NOW, backoff=EXACT)
    assert routed.dlq_reason is reason


def test_rescue_names_its_sweep() -> None:
    assert [k.value for k in Rescue] == ["heartbeat", "deadline", "callback_timeout"]


# ------------------------------------------------------------------ every transition is legal


def _all_transitions() -> list[tuple[str, Transition]]:
    return [
        ("complete", complete(NOW)),
        ("retry", retry(MID, error="e", now=NOW, backoff=EXACT)),
        ("retry exhausted", retry(LAST, error="e", now=NOW, backoff=EXACT)),
        ("fail", fail(MID, error="e", now=NOW)),
        ("snooze", snooze(delay=timedelta(1), now=NOW)),
        ("release", release(MID, error="e", now=NOW)),
        ("cancel", cancel(NOW)),
        ("operator cancel", operator_cancel(NOW)),
        ("drain", drain(NOW)),
        *[
            (f"operator retry {state}", t)
            for state in JobState
            if (t := operator_retry(state, NOW)) is not None
        ],
        ("callback complete", callback_complete(NOW)),
        ("callback fail", callback_fail(MID, error="e", now=NOW)),
        ("callback retry", callback_retry(NOW)),
        ("callback resume", callback_resume(None, NOW)),
        *[
            (f"rescue {k.value}", rescue(k, m, now=NOW, backoff=EXACT))
            for k in Rescue
            for m in (MID, LAST)
        ],
    ]


@pytest.mark.parametrize(("name", "transition"), _all_transitions())
def test_every_decided_state_change_is_in_the_table(name: str, transition: Transition) -> None:
    assert transition.state is not None
    for state in transition.applies_to:
        if state != transition.state:
            assert is_legal_transition(state, transition.state), (name, state)


@pytest.mark.parametrize(("name", "transition"), _all_transitions())
def test_terminal_transitions_set_finalized_at(name: str, transition: Transition) -> None:
    assert transition.state is not None
    assert (transition.finalized_at is not None) is transition.state.is_terminal, name
    # Only a transition out of finalized states (an operator retry) un-finalizes a job.
    assert transition.clear_finalized is (transition.applies_to <= TERMINAL_STATES), name
    assert (transition.dlq_reason is None) or transition.state == S.Failed


@pytest.mark.parametrize(("name", "transition"), _all_transitions())
def test_closing_an_attempt_ends_its_callback(name: str, transition: Transition) -> None:
    """A callback belongs to the attempt that registered it: a transition that takes a
    live attempt out of the live states ends the callback with it."""
    assert transition.state is not None
    if transition.applies_to & LIVE_STATES and transition.state not in LIVE_STATES:
        assert transition.clear_callback, name


# ------------------------------------------------------------------ callback resolution


@pytest.mark.parametrize("facts", [MID, LAST_DLQ])
def test_callback_resolution_decides_each_action(facts: AttemptFacts) -> None:
    decided = {
        action: callback_resolution(
            check_action(action), facts, payload={"p": 1}, error="no", expression="x", now=NOW
        )
        for action in sorted(CALLBACK_ACTIONS)
    }
    assert decided == {
        "complete": callback_complete(NOW),
        "fail": callback_fail(facts, error="no", now=NOW, expression="x"),
        "retry": callback_retry(NOW),
        "resume": callback_resume({"p": 1}, NOW),
    }
    assert {t.state for t in decided.values()} == {S.Completed, S.Failed, S.Available, S.Running}


def test_callback_actions_are_one_enum() -> None:
    assert {"complete", "fail", "retry", "resume"} == CALLBACK_ACTIONS
    assert check_action("fail") is CallbackAction.FAIL
    assert str(CallbackAction.RESUME) == "resume"
    with pytest.raises(ValidationError, match="must be one of") as info:
        check_action("ignore")
    assert info.value.field == "action" and info.value.value == "ignore"
