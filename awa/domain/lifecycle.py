"""The job lifecycle: what every outcome of an attempt does to the job, decided once.

Each function here takes the facts it needs (the attempt's numbers and kind, the queue's
DLQ policy, the backoff and the kind's registered policies, ``now``) and returns a
:class:`Transition`: the target state, the
fields to change, the error entry to append and whether the failed job goes to the DLQ
(with a typed :class:`DlqReason`). No I/O, no clock reads.

Engines only *apply* a transition, under their run-lease guard: they find the attempt
(stale lease: nothing happens), check ``transition.applies_to`` holds its state, write
``transition.apply(job)`` (or the same values as SQL parameters) and, when
``transition.dlq_reason`` is set, move the failed job into the DLQ. The reason strings,
the error-entry shape and every retry-or-fail rule therefore exist only here.

When an attempt ends (its job leaves ``running`` / ``waiting_external``), the engine asks
:func:`effects` for the effects on other jobs that the kind's rule attaches to the job as
the transition left it, and applies them in the same transaction (ADR 0028).

A callback belongs to the attempt that registered it: every transition that closes an
attempt (to a finished state, or back to waiting for a later attempt) ends its callback,
so a token of an earlier attempt never resolves a later one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, assert_never

import attrs

from awa.domain.callbacks import CallbackAction
from awa.domain.job import JobRecord
from awa.domain.kind_policies import Effect, KindPolicies
from awa.domain.policies import Backoff
from awa.domain.states import (
    LIVE_STATES,
    PENDING_STATES,
    TERMINAL_STATES,
    JobState,
)
from awa.domain.validation import MAX_RUN_AT

#: The only state in which a handler still holds the attempt: a parked
#: (``waiting_external``) attempt has no handler left to snooze it or to register a
#: callback, so those outcomes apply to ``running`` attempts alone.
HANDLER_STATES = frozenset({JobState.Running})
#: What an operator may cancel: any job not finalized yet.
NON_TERMINAL_STATES = frozenset(JobState) - TERMINAL_STATES
#: What a queue drain cancels: every job still waiting to run or to be resumed (a running
#: attempt finishes; its outcome decides).
DRAINABLE_STATES = PENDING_STATES

#: Metadata key holding the payload of the last resume (read by ``wait_for_callback``).
CALLBACK_RESULT_KEY = "_awa_callback_result"
#: Error recorded when ``fail_external`` gives no message.
DEFAULT_CALLBACK_ERROR = "callback failed"
#: Error recorded by a ``RetryAfter`` outcome.
HANDLER_RETRY_ERROR = "retry requested by handler"
#: Reason of a handler's ``Cancel`` outcome that names none.
HANDLER_CANCEL_REASON = "cancelled by handler"


class DlqReason(enum.StrEnum):
    """Why a failed job was routed into the dead-letter queue (``dlq_reason``)."""

    #: A retryable failure (or a rescue) with no attempt left.
    MAX_ATTEMPTS_EXHAUSTED = "max_attempts_exhausted"
    #: The handler failed the job outright (``TerminalError``, an unknown kind, ...).
    TERMINAL_ERROR = "terminal_error"
    #: The external callback resolved as a failure.
    CALLBACK_FAILED = "callback_failed"
    #: The callback timed out with no attempt left.
    CALLBACK_TIMEOUT = "callback_timeout"
    #: A job it depends on failed or was cancelled, and its policy for that is ``dlq``.
    DEPENDENCY_FAILED = "dependency_failed"


class Rescue(enum.Enum):
    """The maintenance sweeps that close lost attempts; the value names the sweep."""

    HEARTBEAT_STALE = "heartbeat"
    DEADLINE_EXCEEDED = "deadline"
    CALLBACK_TIMEOUT = "callback_timeout"

    @property
    def error(self) -> str:
        """The error a rescued attempt records (also ``Rescued.reason``)."""
        return RESCUE_ERRORS[self]

    @property
    def applies_to(self) -> frozenset[JobState]:
        """The state of the attempts the sweep closes."""
        if self is Rescue.CALLBACK_TIMEOUT:
            return frozenset({JobState.WaitingExternal})
        return HANDLER_STATES

    @property
    def dlq_reason(self) -> DlqReason:
        """The DLQ reason when the rescued attempt was the last one."""
        if self is Rescue.CALLBACK_TIMEOUT:
            return DlqReason.CALLBACK_TIMEOUT
        return DlqReason.MAX_ATTEMPTS_EXHAUSTED


#: What each rescue records as the attempt's error.
RESCUE_ERRORS: Mapping[Rescue, str] = {
    Rescue.HEARTBEAT_STALE: "heartbeat stale",
    Rescue.DEADLINE_EXCEEDED: "deadline exceeded",
    Rescue.CALLBACK_TIMEOUT: "callback timed out",
}


class AttemptChange(enum.Enum):
    """What a transition does to the job's ``attempt`` counter."""

    #: The attempt stays spent.
    KEEP = "keep"
    #: The attempt was not spent (snooze, release): ``attempt - 1``.
    GIVE_BACK = "give_back"
    #: A fresh attempt budget (``retry_external``, operator retry): ``0``.
    RESET = "reset"

    def after(self, attempt: int) -> int:
        if self is AttemptChange.GIVE_BACK:
            return attempt - 1
        if self is AttemptChange.RESET:
            return 0
        return attempt


def attempts_exhausted(attempt: int, max_attempts: int) -> bool:
    """Whether a retryable failure of attempt ``attempt`` fails the job instead."""
    return attempt >= max_attempts


@attrs.frozen
class ErrorEntry:
    """One element of ``job.errors``. :meth:`as_dict` is the stored shape:
    ``{error, attempt, at[, terminal][, expression]}``."""

    error: str
    attempt: int
    at: datetime
    terminal: bool = False
    #: The callback ``on_fail`` expression that matched, if one did.
    expression: str | None = None

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"error": self.error, "attempt": self.attempt}
        entry["at"] = self.at.isoformat()
        if self.terminal:
            entry["terminal"] = True
        if self.expression is not None:
            entry["expression"] = self.expression
        return entry


def error_entry(
    message: str, *, attempt: int, at: datetime, terminal: bool = False
) -> dict[str, Any]:
    """The stored form of an :class:`ErrorEntry`."""
    return ErrorEntry(message, attempt, at, terminal).as_dict()


@attrs.frozen
class AttemptFacts:
    """What the lifecycle reads about an attempt: its number, its budget (the job's
    ``max_attempts``), whether its queue holds failed jobs in the DLQ and its job's kind
    (whose registered policies apply; ``None``: the defaults)."""

    attempt: int
    max_attempts: int
    dlq_enabled: bool = False
    kind: str | None = None

    @classmethod
    def of(cls, job: JobRecord, *, dlq_enabled: bool) -> AttemptFacts:
        return cls(job.attempt, job.max_attempts, dlq_enabled, job.kind)


@attrs.frozen(eq=True, hash=False)
class Transition:
    """The decided outcome of one attempt. ``None`` fields leave the column as it is.

    ``state`` is ``None`` only for a change that keeps the state (a callback heartbeat).
    ``error`` is appended to ``errors``; ``metadata`` is merged into ``metadata`` (top
    level keys); ``dlq_reason`` set means the failed job moves into the DLQ.
    """

    state: JobState | None
    applies_to: frozenset[JobState] = LIVE_STATES
    run_at: datetime | None = None
    attempt: AttemptChange = AttemptChange.KEEP
    finalized_at: datetime | None = None
    error: ErrorEntry | None = None
    dlq_reason: DlqReason | None = None
    heartbeat_at: datetime | None = None
    callback_timeout_at: datetime | None = None
    metadata: Mapping[str, Any] | None = None
    clear_progress: bool = False
    clear_callback: bool = False
    #: The job is no longer finalized (an operator retry of a terminal job).
    clear_finalized: bool = False

    def applies(self, state: JobState) -> bool:
        """Whether an attempt in ``state`` takes this transition (else it is stale)."""
        return state in self.applies_to

    def target(self, current: JobState) -> JobState:
        return current if self.state is None else self.state

    def changes(self, job: JobRecord) -> dict[str, Any]:
        """The fields of ``job`` this transition changes, other than ``state``."""
        out: dict[str, Any] = {}
        if self.run_at is not None:
            out["run_at"] = self.run_at
        if self.attempt is not AttemptChange.KEEP:
            out["attempt"] = self.attempt.after(job.attempt)
        if self.finalized_at is not None:
            out["finalized_at"] = self.finalized_at
        if self.clear_finalized:
            out["finalized_at"] = None
        if self.error is not None:
            out["errors"] = (*job.errors, self.error.as_dict())
        if self.heartbeat_at is not None:
            out["heartbeat_at"] = self.heartbeat_at
        if self.callback_timeout_at is not None:
            out["callback_timeout_at"] = self.callback_timeout_at
        if self.metadata is not None:
            out["metadata"] = {**job.metadata, **self.metadata}
        if self.clear_progress:
            out["progress"] = None
        if self.clear_callback:
            out["callback_id"] = None
            out["callback_timeout_at"] = None
        return out

    def apply(self, job: JobRecord) -> JobRecord:
        """``job`` after the transition (the DLQ move, if any, is the engine's part)."""
        return attrs.evolve(job, state=self.target(job.state), **self.changes(job))


def _route(facts: AttemptFacts, reason: DlqReason) -> DlqReason | None:
    """DLQ routing: a failed job goes to the DLQ only where its queue enables it."""
    return reason if facts.dlq_enabled else None


def _failed(
    facts: AttemptFacts,
    entry: ErrorEntry,
    reason: DlqReason,
    *,
    now: datetime,
    applies_to: frozenset[JobState] = LIVE_STATES,
) -> Transition:
    return Transition(
        JobState.Failed,
        applies_to=applies_to,
        finalized_at=now,
        error=entry,
        dlq_reason=_route(facts, reason),
        clear_callback=True,
    )


def _retry_or_fail(
    facts: AttemptFacts,
    *,
    error: str,
    now: datetime,
    backoff: Backoff,
    policies: KindPolicies | None,
    delay: timedelta | None,
    exhausted_reason: DlqReason,
    applies_to: frozenset[JobState],
) -> Transition:
    policy = None if policies is None else policies.retry_for(facts.kind)
    budget = facts.max_attempts if policy is None else policy.budget(facts.max_attempts)
    if attempts_exhausted(facts.attempt, budget):
        # The last attempt's error ends the job, so it is marked terminal (as awa-pg does).
        entry = ErrorEntry(error, facts.attempt, now, terminal=True)
        return _failed(facts, entry, exhausted_reason, now=now, applies_to=applies_to)
    entry = ErrorEntry(error, facts.attempt, now)
    wait = delay if delay is not None else backoff.policy_delay(policy, facts.attempt)
    return Transition(
        JobState.Retryable,
        applies_to=applies_to,
        run_at=now + wait,
        error=entry,
        clear_callback=True,
    )


# ------------------------------------------------------------------ handler outcomes


def complete(now: datetime) -> Transition:
    """The attempt succeeded: ``completed``, progress cleared."""
    return Transition(
        JobState.Completed, finalized_at=now, clear_progress=True, clear_callback=True
    )


def retry(
    facts: AttemptFacts,
    *,
    error: str,
    now: datetime,
    backoff: Backoff,
    policies: KindPolicies | None = None,
    delay: timedelta | None = None,
) -> Transition:
    """A retryable failure: ``retryable`` at ``now + delay`` (when ``delay`` is ``None``,
    the delay of the kind's registered retry policy, else the default backoff, for the
    attempt); with no attempt left (the policy's budget, else the job's), ``failed``
    (DLQ reason ``max_attempts_exhausted``)."""
    return _retry_or_fail(
        facts,
        error=error,
        now=now,
        backoff=backoff,
        policies=policies,
        delay=delay,
        exhausted_reason=DlqReason.MAX_ATTEMPTS_EXHAUSTED,
        applies_to=LIVE_STATES,
    )


def fail(facts: AttemptFacts, *, error: str, now: datetime) -> Transition:
    """A terminal failure: ``failed`` with a terminal error entry (DLQ reason
    ``terminal_error``)."""
    entry = ErrorEntry(error, facts.attempt, now, terminal=True)
    return _failed(facts, entry, DlqReason.TERMINAL_ERROR, now=now)


def snooze(*, delay: timedelta, now: datetime) -> Transition:
    """Back to ``scheduled`` at ``now + delay``; the attempt is given back, no error."""
    return Transition(
        JobState.Scheduled,
        applies_to=HANDLER_STATES,
        run_at=now + delay,
        attempt=AttemptChange.GIVE_BACK,
        clear_callback=True,
    )


def release(facts: AttemptFacts, *, error: str, now: datetime) -> Transition:
    """Give the attempt back unfinished (shutdown): ``retryable`` due now, the attempt
    not spent, ``error`` recorded against the attempt that was running."""
    return Transition(
        JobState.Retryable,
        run_at=now,
        attempt=AttemptChange.GIVE_BACK,
        error=ErrorEntry(error, facts.attempt, now),
        clear_callback=True,
    )


def cancel(now: datetime, *, applies_to: frozenset[JobState] = LIVE_STATES) -> Transition:
    """``cancelled`` now, no error entry. The default is the handler's cancel of its own
    attempt; :func:`operator_cancel` and :func:`drain` widen the states it applies to."""
    return Transition(
        JobState.Cancelled, applies_to=applies_to, finalized_at=now, clear_callback=True
    )


# ------------------------------------------------------------------ external callbacks


def callback_complete(now: datetime) -> Transition:
    """``complete_external``: as :func:`complete` (which ends the callback)."""
    return complete(now)


def callback_fail(
    facts: AttemptFacts, *, error: str | None, now: datetime, expression: str | None = None
) -> Transition:
    """``fail_external`` (or an ``on_fail`` expression that matched, named in the entry):
    ``failed`` with a terminal entry (DLQ reason ``callback_failed``); the callback ends."""
    entry = ErrorEntry(
        error or DEFAULT_CALLBACK_ERROR, facts.attempt, now, terminal=True, expression=expression
    )
    return _failed(facts, entry, DlqReason.CALLBACK_FAILED, now=now)


def callback_retry(now: datetime) -> Transition:
    """``retry_external`` (and an operator retry of a waiting job): ``available`` now with
    a fresh attempt budget, no error recorded, the callback ended."""
    return Transition(
        JobState.Available, run_at=now, attempt=AttemptChange.RESET, clear_callback=True
    )


def callback_resume(payload: Any, now: datetime) -> Transition:
    """``resume_external``: the handler's ``wait_for_callback`` returns ``payload``; the
    attempt runs on (a later wait registers a new callback)."""
    return Transition(
        JobState.Running,
        heartbeat_at=now,
        metadata={CALLBACK_RESULT_KEY: payload},
        clear_callback=True,
    )


def callback_resolution(
    action: CallbackAction,
    facts: AttemptFacts,
    *,
    payload: Any = None,
    error: str | None = None,
    expression: str | None = None,
    now: datetime,
) -> Transition:
    """The transition of ``resolve_callback`` with ``action``: :func:`callback_complete`,
    :func:`callback_fail` (``error``, ``expression``), :func:`callback_retry` or
    :func:`callback_resume` (``payload``). ``facts`` are read only by a fail."""
    match action:
        case CallbackAction.COMPLETE:
            return callback_complete(now)
        case CallbackAction.FAIL:
            return callback_fail(facts, error=error, now=now, expression=expression)
        case CallbackAction.RETRY:
            return callback_retry(now)
        case CallbackAction.RESUME:
            return callback_resume(payload, now)
        case _:
            assert_never(action)


def callback_heartbeat(*, timeout: timedelta, now: datetime) -> Transition:
    """``heartbeat_callback``: the callback's timeout moves to ``now + timeout``; the
    state is kept."""
    return Transition(None, callback_timeout_at=now + timeout)


# ------------------------------------------------------------------ rescue


def rescue(
    kind: Rescue,
    facts: AttemptFacts,
    *,
    now: datetime,
    backoff: Backoff,
    policies: KindPolicies | None = None,
) -> Transition:
    """A lost attempt closed by a maintenance sweep: a retryable failure recording
    ``kind.error`` (the delay and budget of the job kind's retry policy where this
    process registered one, else the default backoff and the job's own budget); with no
    attempt left, ``failed`` with ``kind.dlq_reason``. Either way the attempt's callback
    ends."""
    return _retry_or_fail(
        facts,
        error=kind.error,
        now=now,
        backoff=backoff,
        policies=policies,
        delay=None,
        exhausted_reason=kind.dlq_reason,
        applies_to=kind.applies_to,
    )


# ------------------------------------------------------------------ effects


def ended_attempt(before: JobState, after: JobState) -> bool:
    """Whether a change from ``before`` to ``after`` ended an attempt: the job was
    running or waiting for a callback and is neither any more."""
    return before in LIVE_STATES and after not in LIVE_STATES


def effects(policies: KindPolicies | None, job: JobRecord) -> tuple[Effect, ...]:
    """The effects on other jobs that go with an attempt's end which left ``job`` as it
    is: what the rule registered for its kind returns (none without a rule). An effect
    aimed at ``job`` itself is refused with ``ValueError``: a transition decides its own
    job's fields."""
    rule = None if policies is None else policies.effects_for(job.kind)
    if rule is None:
        return ()
    decided = tuple(rule(job))
    for effect in decided:
        if effect.job_id == job.id:
            raise ValueError(f"an effect of job {job.id}'s transition names the job itself")
    return decided


def dependencies_met(now: datetime) -> Transition:
    """Every parent of a waiting job completed: ``available`` now (ADR 0032). Applies to
    a waiting job only (``scheduled``); one an operator cancelled meanwhile stays so."""
    return Transition(JobState.Available, applies_to=frozenset({JobState.Scheduled}), run_at=now)


#: The error entry of a waiting job its parent's failure ended.
DEPENDENCY_FAILED_ERROR = "a job it depends on failed or was cancelled"


def dependency_failed(now: datetime) -> Transition:
    """A parent of a waiting job (or one of its ancestors) failed or was cancelled for
    good: the waiting job is ``cancelled`` with an error entry saying why (ADR 0032)."""
    return Transition(
        JobState.Cancelled,
        applies_to=frozenset({JobState.Scheduled}),
        finalized_at=now,
        error=ErrorEntry(DEPENDENCY_FAILED_ERROR, 0, now, terminal=True),
        clear_callback=True,
    )


def dependency_dead_lettered(now: datetime) -> Transition:
    """As :func:`dependency_failed`, for a waiting job whose policy for that parent is
    ``dlq``: it is ``failed`` and moves into the DLQ (reason ``dependency_failed``), for
    an operator to retry or purge (ADR 0032)."""
    return Transition(
        JobState.Failed,
        applies_to=frozenset({JobState.Scheduled}),
        finalized_at=now,
        error=ErrorEntry(DEPENDENCY_FAILED_ERROR, 0, now, terminal=True),
        dlq_reason=DlqReason.DEPENDENCY_FAILED,
        clear_callback=True,
    )


def dependency_restored() -> Transition:
    """A job its parent's failure cancelled waits again because that parent was retried
    (and no other failed parent holds it): ``scheduled`` at the waiting instant, no
    longer finalized (ADR 0032); ``run_at`` is the waiting instant."""
    return Transition(
        JobState.Scheduled,
        applies_to=frozenset({JobState.Cancelled}),
        run_at=MAX_RUN_AT,
        clear_finalized=True,
    )


# ------------------------------------------------------------------ operator actions


def operator_cancel(now: datetime) -> Transition:
    """An operator cancels one job: any job not finalized yet (a live attempt's worker is
    told by the engine)."""
    return cancel(now, applies_to=NON_TERMINAL_STATES)


def drain(now: datetime) -> Transition:
    """A queue drain cancels each of its pending jobs."""
    return cancel(now, applies_to=DRAINABLE_STATES)


#: Finalized states an operator's retry starts over: a completed job succeeded, and running
#: it again is a new job's business (awa-pg refuses it too).
RETRYABLE_TERMINAL_STATES = frozenset({JobState.Failed, JobState.Cancelled})


def operator_retry_applies(state: JobState) -> bool:
    """Whether an operator's retry changes a job in ``state`` (see :func:`operator_retry`)."""
    return state in RETRYABLE_TERMINAL_STATES or state == JobState.WaitingExternal


def operator_retry(state: JobState, now: datetime) -> Transition | None:
    """An operator retries a job in ``state``: a failed or cancelled job starts over
    (``available`` now, a fresh attempt budget, no longer finalized, its errors kept); a
    waiting attempt is retried as ``retry_external``. Any other job is left as it is
    (``None``): a completed one succeeded, and a running, available, scheduled or
    retryable one is already on its way (awa-pg 0.6.9 refuses all of them too)."""
    if state in RETRYABLE_TERMINAL_STATES:
        return Transition(
            JobState.Available,
            applies_to=RETRYABLE_TERMINAL_STATES,
            run_at=now,
            attempt=AttemptChange.RESET,
            clear_finalized=True,
        )
    if state == JobState.WaitingExternal:
        return callback_retry(now)
    return None
