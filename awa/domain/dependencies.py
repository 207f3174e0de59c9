"""Job dependencies (ADR 0032): a job inserted with ``depends_on`` waits until every
parent has completed.

A waiting job is ``scheduled`` at :data:`WAITING_RUN_AT` (the last instant a job may be
scheduled for), so code that reads the eight states sees a job not due yet, and no
promotion ever makes it due. Its edges are stored beside the jobs; the engine that
finishes a parent asks which children that finish decides (:class:`DependentOutcome`)
and applies :func:`effects` in the same transaction.

This module decides what an insert with parents becomes (:func:`plan`) and what the
answered children undergo (:func:`effects`); the engines store the edges and find the
children.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain import lifecycle
from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.job import JobSpec
from awa.domain.kind_policies import ChangeJob
from awa.domain.results import RESULT_RETENTION
from awa.domain.states import JobState
from awa.domain.validation import MAX_RUN_AT

#: The ``run_at`` of a job waiting on its parents.
WAITING_RUN_AT = MAX_RUN_AT
#: The most parents one job may name.
MAX_PARENTS = 100
#: The metadata key listing a job's parents (ids, in ``depends_on`` order), so a worker
#: knows whose results to hand the handler (``job.parent_results``) without a lookup.
PARENTS_METADATA = "awa:parents"
#: The metadata key that marks a batch's callback job (ADR 0035, ``awa.domain.batches``):
#: its parents are the batch's jobs, whose results it is not handed.
BATCH_METADATA = "awa:batch"
#: Parent states an insert refuses: the parent will never complete.
FINISHED_FAILED = frozenset({JobState.Failed, JobState.Cancelled})
#: How long an edge is kept after it was resolved (its parent completed, or failed and
#: so resolved it) once its child has finished too: the results' retention, so a
#: finished workflow's graph and a batch's counts read as long as its results do. A
#: batch's counts are then kept on its ``awa.batches`` row for one more retention.
EDGE_RETENTION = RESULT_RETENTION
#: How many children's edges the leader's retention duty prunes per statement.
EDGE_PRUNE_BATCH = 200
#: How long a parent of an unresolved edge must have been seen absent from every engine
#: before the maintenance leader answers its children as if it were cancelled (ADR 0032,
#: "A parent that vanishes"): it is looked for again at least this long after the first
#: sighting, under the lock a storage transition's move takes, so a parent mid-way
#: through a move between engines or ring slots is found again instead of answered.
VANISHED_GRACE = timedelta(minutes=5)


class OnParentFailure(enum.StrEnum):
    """What a parent's failure (failed, in the DLQ, or cancelled for good) does to a job
    waiting on it; chosen per parent (:class:`Dependency`) or per workflow step."""

    #: The waiting job is cancelled, and so are the jobs waiting on it (the default).
    CANCEL = "cancel"
    #: The parent counts as done: the job runs once its other parents completed.
    RUN = "run"
    #: The waiting job fails into the DLQ (reason ``dependency_failed``).
    DLQ = "dlq"


def on_parent_failure(value: Any, field: str = "on_failure") -> OnParentFailure:
    """``value`` as a policy, or ``ValidationError`` naming the choices."""
    try:
        return OnParentFailure(value)
    except ValueError:
        choices = ", ".join(repr(p.value) for p in OnParentFailure)
        raise ValidationError(field, f"must be one of {choices}, got {value!r}") from None


@attrs.frozen
class Dependency:
    """A ``depends_on`` entry with a policy: ``Dependency(parent, on_failure="run")``,
    where ``parent`` is a job id, a job handle or (in a workflow) a step."""

    parent: Any
    on_failure: OnParentFailure = attrs.field(
        default=OnParentFailure.CANCEL, converter=on_parent_failure
    )


class DependentOutcome(enum.StrEnum):
    """What a parent's finish means for a waiting child (the SQL answers these words)."""

    #: Its last unsatisfied parent completed (or failed under ``run``): it runs.
    RELEASED = "released"
    #: A parent (or an ancestor) failed or was cancelled for good, under ``cancel``.
    DOOMED = "doomed"
    #: As ``doomed``, under ``dlq``.
    DEAD_LETTERED = "dead_lettered"
    #: A retried parent no longer holds it: it waits again.
    RESTORED = "restored"


def parents_of(value: Any) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ids ``depends_on`` names (job ids, objects with an ``id`` such as a job handle
    or a record, or :class:`Dependency` entries around either), in order, without
    repeats, and each one's :class:`OnParentFailure` value (empty when all are
    ``cancel``). Refuses anything else, and more than :data:`MAX_PARENTS`."""
    if value is None:
        return (), ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValidationTypeError(
            "depends_on", f"must be a list of job ids or jobs, got {type(value).__name__}"
        )
    policies: dict[int, OnParentFailure] = {}
    for item in value:
        policy = OnParentFailure.CANCEL
        if isinstance(item, Dependency):
            item, policy = item.parent, item.on_failure
        job_id = getattr(item, "id", item)
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationTypeError(
                "depends_on", f"each entry must be a job id or a job, got {type(item).__name__}"
            )
        if job_id <= 0:
            raise ValidationError("depends_on", f"job id {job_id} is not positive", value=job_id)
        if job_id not in policies:
            policies[job_id] = policy
        if len(policies) > MAX_PARENTS:
            raise ValidationError(
                "depends_on",
                f"names more than {MAX_PARENTS} jobs; at most {MAX_PARENTS} are allowed",
            )
    ids = tuple(policies)
    named = tuple(str(p) for p in policies.values())
    return ids, (named if any(p != OnParentFailure.CANCEL for p in named) else ())


def parent_ids(value: Any) -> tuple[int, ...]:
    """The ids ``depends_on`` names (see :func:`parents_of`)."""
    return parents_of(value)[0]


def policies_of(spec: JobSpec) -> tuple[OnParentFailure, ...]:
    """Each of ``spec``'s parents' policy, aligned with ``spec.depends_on``."""
    if not spec.on_parent_failure:
        return (OnParentFailure.CANCEL,) * len(spec.depends_on)
    return tuple(OnParentFailure(p) for p in spec.on_parent_failure)


def check_spec(spec: JobSpec) -> None:
    """A spec with parents sets no ``run_at`` of its own: its parents decide when it runs;
    its policies, when given, are one valid word per parent."""
    if spec.depends_on and spec.run_at is not None:
        raise ValidationError("depends_on", "a job that depends on others cannot also set run_at")
    if spec.on_parent_failure:
        if len(spec.on_parent_failure) != len(spec.depends_on):
            raise ValidationError("on_parent_failure", "must name one policy per parent")
        for policy in spec.on_parent_failure:
            on_parent_failure(policy, "on_parent_failure")


@attrs.frozen
class Plan:
    """An insert with parents, decided: the spec to insert (waiting, or as given when every
    parent completed already), its parents and which of them are satisfied."""

    spec: JobSpec
    parents: tuple[int, ...]
    satisfied: frozenset[int]

    @property
    def pending(self) -> int:
        return len(self.parents) - len(self.satisfied)


def plan(spec: JobSpec, states: Mapping[int, JobState]) -> Plan:
    """Decide the insert of ``spec`` given its parents' current ``states`` (a parent
    missing from the mapping does not exist). Refuses an unknown parent and one that
    failed or was cancelled, naming them; nothing is written then."""
    unknown = [p for p in spec.depends_on if p not in states]
    if unknown:
        raise ValidationError(
            "depends_on", f"no job with id {', '.join(map(str, unknown))}", value=unknown
        )
    dead = [p for p in spec.depends_on if states[p] in FINISHED_FAILED]
    if dead:
        named = ", ".join(f"{p} ({states[p]})" for p in dead)
        raise ValidationError("depends_on", f"job {named} finished without completing", value=dead)
    satisfied = frozenset(p for p in spec.depends_on if states[p] == JobState.Completed)
    waiting = len(satisfied) < len(spec.depends_on)
    # A batch's callback (up to MAX_BATCH_SIZE parents) reads its members' counts, not
    # their results: it is not handed them (ADR 0035).
    marked = (
        spec
        if BATCH_METADATA in spec.metadata
        else attrs.evolve(spec, metadata={**spec.metadata, PARENTS_METADATA: list(spec.depends_on)})
    )
    planned = attrs.evolve(marked, run_at=WAITING_RUN_AT) if waiting else marked
    return Plan(planned, spec.depends_on, satisfied)


def waits_on_parents(state: JobState | str, run_at: datetime | None) -> bool:
    """Whether a job in ``state`` scheduled for ``run_at`` waits on its parents: its
    ``run_at`` is :data:`WAITING_RUN_AT`, a marker and not a time to show."""
    return JobState.parse(state) == JobState.Scheduled and run_at == WAITING_RUN_AT


def finished(state: JobState) -> tuple[bool, bool]:
    """Whether a job that ended an attempt in ``state`` completed, and whether it failed
    or was cancelled for good (a retry or a snooze is neither)."""
    return state == JobState.Completed, state in FINISHED_FAILED


def deleted_parents(jobs: Iterable[tuple[int, JobState]], waited_on: Container[int]) -> list[int]:
    """Of the jobs an operator deleted (each id with the state it was deleted in), those
    that count as cancelled for their children, in the transaction that deletes them (ADR
    0032, "A parent that vanishes"), so each child's policy applies (``cancel``: it is
    cancelled; ``dlq``: into the DLQ; ``run``: it goes on) instead of it waiting for ever:
    every job a child still waits on through an unresolved edge (``waited_on``, read after
    the delete), whatever state it was deleted in, and every job deleted before it
    finished (an insert naming it may still be committing: the resolution takes its lock
    and sees the edge). A job that finished through its own attempt or an operator answered
    its children then; one cancelled by another job's kind rule did not (an effect's
    transition carries no further effects, ADR 0028), so the edge, not the state, decides.
    The ``DELETE`` on ``awa.jobs`` records a job by the same edge
    (``awa.dependency_waited_on``) for the maintenance leader to answer."""
    return [job_id for job_id, state in jobs if job_id in waited_on or not state.is_terminal]


def effects(
    answered: Iterable[tuple[int, DependentOutcome | str]], now: datetime
) -> tuple[ChangeJob, ...]:
    """The changes the engine applies to children its store answered, one per child in
    the order first answered. A child answered both ``doomed`` and ``dead_lettered`` (two
    failed parents with different policies) goes to the DLQ, where an operator sees it."""
    decided: dict[int, DependentOutcome] = {}
    for child, outcome in answered:
        word = DependentOutcome(outcome)
        if decided.get(child) is not DependentOutcome.DEAD_LETTERED:
            decided[child] = word
    transitions = {
        DependentOutcome.RELEASED: lifecycle.dependencies_met(now),
        DependentOutcome.DOOMED: lifecycle.dependency_failed(now),
        DependentOutcome.DEAD_LETTERED: lifecycle.dependency_dead_lettered(now),
        DependentOutcome.RESTORED: lifecycle.dependency_restored(),
    }
    return tuple(ChangeJob(child, transitions[word]) for child, word in decided.items())


def order_steps(parents: Mapping[str, Sequence[str]]) -> list[str]:
    """The steps of a workflow graph (each step's parent steps by name) in an order that
    puts every parent before its children, keeping the order the steps were given where
    the graph allows. Refuses a parent that is no step and a cycle, naming the steps."""
    for step, named in parents.items():
        unknown = [p for p in named if p not in parents]
        if unknown:
            raise ValidationError(
                "depends_on", f"step {step!r} depends on {unknown[0]!r}, which is no step"
            )
        if step in named:
            raise ValidationError("depends_on", f"step {step!r} depends on itself")
    waiting = {step: len(set(named)) for step, named in parents.items()}
    children: dict[str, list[str]] = {step: [] for step in parents}
    for step, named in parents.items():
        for parent in set(named):
            children[parent].append(step)
    position = {step: index for index, step in enumerate(parents)}
    ready = [step for step, count in waiting.items() if count == 0]
    ordered: list[str] = []
    while ready:
        ready.sort(key=position.__getitem__, reverse=True)
        step = ready.pop()
        ordered.append(step)
        for child in children[step]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(ordered) < len(parents):
        stuck = sorted((s for s in parents if waiting[s] > 0), key=position.__getitem__)
        raise ValidationError(
            "depends_on", f"the steps {', '.join(map(repr, stuck))} form a cycle", value=stuck
        )
    return ordered
