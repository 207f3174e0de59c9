"""Durable batch operations: the filter language, the operation specs, the per-job change
and the operation's state machine. Engines compile :class:`BatchFilter` to their own
query and apply :func:`batch_change`; the maintenance leader drives the states."""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from awa.domain.errors import ValidationError
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.domain.validation import MAX_NAME_LENGTH, validate_priority, validate_queue

#: Metadata keys recording where a moved or reprioritised job came from (the first value
#: wins: a job changed twice still names its original).
ORIGINAL_PRIORITY_KEY = "_awa_original_priority"
ORIGINAL_QUEUE_KEY = "_awa_original_queue"

#: Only queued jobs are changed: a claimed attempt keeps its lane, terminal jobs are history.
ELIGIBLE_STATES = frozenset({JobState.Available, JobState.Scheduled})

#: How many items the runner applies between two looks at a cancellation request.
CHUNK_SIZE = 100
#: How many items a preview shows.
PREVIEW_SAMPLE = 10
#: How long a finished operation is kept before retention may purge it.
DEFAULT_RETENTION = timedelta(days=90)

FILTER_FIELDS = ("kind", "queue", "ids", "tag", "state", "created_at_gte", "created_at_lt")


class BatchOpKind(enum.StrEnum):
    SET_PRIORITY = "set_priority"
    MOVE_QUEUE = "move_queue"


class BatchOpState(enum.StrEnum):
    """``pending -> scanning -> running -> completed``; a cancel request goes through
    ``cancelling`` to ``cancelled``; an unexpected error ends in ``failed``. The final
    states are absorbing (:func:`may_move`)."""

    PENDING = "pending"
    SCANNING = "scanning"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @classmethod
    def parse(cls, value: Any) -> BatchOpState:
        try:
            return cls(value)
        except ValueError:
            raise ValidationError(
                "state", f"unknown batch operation state: {value}", value=value
            ) from None

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({BatchOpState.COMPLETED, BatchOpState.CANCELLED, BatchOpState.FAILED})
#: States a cancel request may move to ``cancelling``.
CANCELLABLE_STATES = frozenset({BatchOpState.PENDING, BatchOpState.SCANNING, BatchOpState.RUNNING})
#: States the runner still has work in.
ACTIVE_STATES = CANCELLABLE_STATES | {BatchOpState.CANCELLING}


class ItemOutcome(enum.StrEnum):
    """What happened to one job of an operation (``batch_operation_items.state``)."""

    PROCESSED = "processed"
    SKIPPED = "skipped"
    ERRORED = "errored"
    #: The engine asked does not hold the job (another engine may).
    MISSING = "missing"


@attrs.frozen
class BatchFilter:
    """Which jobs an operation targets; every set field must match (``ids`` is an
    intersection, ``created_at`` a half-open range)."""

    kind: str | None = None
    queue: str | None = None
    ids: tuple[int, ...] | None = None
    tag: str | None = None
    state: JobState | None = None
    created_at_gte: datetime | None = None
    created_at_lt: datetime | None = None

    @property
    def is_empty(self) -> bool:
        """No narrowing field is set (an empty ``ids`` list narrows nothing either)."""
        return not (
            self.kind
            or self.queue
            or self.ids
            or self.tag
            or self.state is not None
            or self.created_at_gte is not None
            or self.created_at_lt is not None
        )

    def matches(self, job: JobRecord) -> bool:
        """The predicate form (the in-memory engine's compiler); includes eligibility."""
        return (
            job.state in ELIGIBLE_STATES
            and (self.kind is None or job.kind == self.kind)
            and (self.queue is None or job.queue == self.queue)
            and (self.ids is None or job.id in self.ids)
            and (self.tag is None or self.tag in job.tags)
            and (self.state is None or job.state == self.state)
            and (self.created_at_gte is None or job.created_at >= self.created_at_gte)
            and (self.created_at_lt is None or job.created_at < self.created_at_lt)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "queue": self.queue,
            "ids": None if self.ids is None else list(self.ids),
            "tag": self.tag,
            "state": None if self.state is None else self.state.sql_name,
            "created_at_gte": _iso(self.created_at_gte),
            "created_at_lt": _iso(self.created_at_lt),
        }


@attrs.frozen
class BatchSpec:
    """What an operation does to each job: a new priority, a new queue, or both."""

    op_kind: BatchOpKind
    priority: int | None = None
    queue: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op_kind": str(self.op_kind)}
        if self.priority is not None:
            doc["priority"] = self.priority
        if self.queue is not None:
            doc["queue"] = self.queue
        return doc


@attrs.frozen
class BatchOperation:
    """One row of ``awa.batch_operations``."""

    id: str
    op_kind: BatchOpKind
    filter: BatchFilter
    spec: BatchSpec
    state: BatchOpState
    submitted_at: datetime
    updated_at: datetime
    submitted_by: str | None = None
    started_at: datetime | None = None
    finalized_at: datetime | None = None
    cursor: dict[str, Any] | None = None
    total_matched: int | None = None
    processed: int = 0
    skipped: int = 0
    errored: int = 0
    last_error: str | None = None
    runner_instance: str | None = None
    retention_until: datetime | None = None


@attrs.frozen
class ItemResult:
    job_id: int
    outcome: ItemOutcome
    error: str | None = None


# ------------------------------------------------------------------ parsing


def parse_operation_id(value: Any) -> str:
    """The one spelling of an operation id (a UUID, lower case with hyphens) that every
    engine stores and answers with; ``ValidationError`` for anything that is not a UUID."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise ValidationError("operation_id", f"invalid batch operation id: {value!r}") from None


def operation_not_found(op_id: str) -> ValidationError:
    """The error of a call naming an operation that does not exist (any more)."""
    return ValidationError("operation_id", f"batch operation not found: {op_id}")


def runner_instance(runner: str) -> str | None:
    """What an operation records as its runner: the runtime's id when it is a UUID (in the
    one spelling of :func:`parse_operation_id`), else nothing."""
    try:
        return str(uuid.UUID(runner))
    except (ValueError, TypeError, AttributeError):
        return None


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_timestamp(field: str, value: Any) -> datetime | None:
    """An aware datetime or an RFC 3339 string with an offset (a naive one is ambiguous)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise TypeError(f"{field}: expected a datetime with non-None tzinfo")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{field}: expected an RFC 3339 string, got {type(value).__name__}")
    if not _RFC3339.fullmatch(value.strip()):
        raise ValidationError(
            field, f"invalid RFC3339 timestamp (an offset such as Z is required): {value!r}"
        )
    return datetime.fromisoformat(value.strip().replace("z", "Z").replace("t", "T"))


def _text(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"filter.{field}: expected a string, got {type(value).__name__}")
    return value


def parse_filter(raw: Mapping[str, Any] | None) -> BatchFilter:
    """Validate a filter dict (``BatchOperationFilter``); ``None`` values mean unset."""
    if raw is None:
        return BatchFilter()
    if not isinstance(raw, Mapping):
        raise TypeError(f"filter: expected a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(FILTER_FIELDS))
    if unknown:
        raise ValidationError(
            "filter", f"unknown field(s) {unknown}; known fields are {list(FILTER_FIELDS)}"
        )
    ids_raw = raw.get("ids")
    ids: tuple[int, ...] | None = None
    if ids_raw is not None:
        if isinstance(ids_raw, str | bytes) or not hasattr(ids_raw, "__iter__"):
            raise TypeError(f"filter.ids: expected a list of ints, got {type(ids_raw).__name__}")
        items = list(ids_raw)
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int):
                raise TypeError(f"filter.ids: expected ints, got {type(item).__name__}")
        ids = tuple(sorted(set(items)))
    state_raw = raw.get("state")
    state = None if state_raw is None else JobState.parse(state_raw)
    return BatchFilter(
        kind=_text("kind", raw.get("kind")),
        queue=_text("queue", raw.get("queue")),
        ids=ids,
        tag=_text("tag", raw.get("tag")),
        state=state,
        created_at_gte=parse_timestamp("created_at_gte", raw.get("created_at_gte")),
        created_at_lt=parse_timestamp("created_at_lt", raw.get("created_at_lt")),
    )


def parse_op_kind(value: Any) -> BatchOpKind:
    try:
        return BatchOpKind(value)
    except ValueError:
        raise ValidationError(
            "op_kind", f"unknown batch operation kind: {value}", value=value
        ) from None


def _spec_int(spec: Mapping[str, Any], key: str, *, required: bool) -> int | None:
    if key not in spec or spec[key] is None:
        if required:
            raise ValueError(f"batch operation spec missing {key!r}")
        return None
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"spec.{key}: expected an integer, got {type(value).__name__}")
    return validate_priority(value)


def parse_spec(op_kind: Any, spec: Mapping[str, Any] | None) -> BatchSpec:
    """Validate ``spec`` for ``op_kind``: ``set_priority`` needs ``priority`` (1..4);
    ``move_queue`` needs ``queue`` (1..200 characters) and may set ``priority``."""
    kind = parse_op_kind(op_kind)
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec: expected a dict, got {type(spec).__name__}")
    if kind == BatchOpKind.SET_PRIORITY:
        return BatchSpec(kind, priority=_spec_int(spec, "priority", required=True))
    if "queue" not in spec or spec["queue"] is None:
        raise ValueError("batch operation spec missing 'queue'")
    queue = spec["queue"]
    if not isinstance(queue, str):
        raise TypeError(f"spec.queue: expected a string, got {type(queue).__name__}")
    if not 1 <= len(queue) <= MAX_NAME_LENGTH or "\x00" in queue:
        raise ValidationError(
            "queue", f"destination queue must be 1..={MAX_NAME_LENGTH} characters", value=queue
        )
    validate_queue(queue)
    return BatchSpec(kind, priority=_spec_int(spec, "priority", required=False), queue=queue)


def check_applicable(spec: BatchSpec, filter: BatchFilter) -> None:
    """A state filter may only name a state the operation changes."""
    if filter.state is not None and filter.state not in ELIGIBLE_STATES:
        raise ValidationError(
            "filter.state",
            f"{spec.op_kind} only supports available or scheduled state filters",
            value=filter.state.sql_name,
        )


def require_scope(filter: BatchFilter, allow_all: bool) -> None:
    """Refuse an operation over every queued job unless asked for explicitly."""
    if filter.is_empty and not allow_all:
        raise ValidationError("filter", "batch operation requires a filter or allow_all=true")


# ------------------------------------------------------------------ the per-job change


def batch_change(job: JobRecord, spec: BatchSpec) -> JobRecord | None:
    """The job after ``spec``, or ``None`` when it is skipped: no longer queued, or already
    where the operation would put it. The first original priority / queue is recorded."""
    if job.state not in ELIGIBLE_STATES:
        return None
    priority = job.priority if spec.priority is None else spec.priority
    queue = job.queue if spec.queue is None else spec.queue
    if priority == job.priority and queue == job.queue:
        return None
    metadata = dict(job.metadata)
    if priority != job.priority:
        metadata.setdefault(ORIGINAL_PRIORITY_KEY, job.priority)
    if queue != job.queue:
        metadata.setdefault(ORIGINAL_QUEUE_KEY, job.queue)
    return attrs.evolve(job, priority=priority, queue=queue, metadata=metadata)


def first_results(results: Sequence[ItemResult]) -> list[ItemResult]:
    """The results an engine records, in input order: the first one given for each item
    (a chunk recorded twice, or an item named twice, counts once). Of those that find their
    item still pending, the last error given is the operation's ``last_error``."""
    seen: set[int] = set()
    first: list[ItemResult] = []
    for result in results:
        if result.job_id not in seen:
            seen.add(result.job_id)
            first.append(result)
    return first


def replaces(recorded: ItemOutcome | None, result: ItemOutcome) -> bool:
    """Whether ``result`` is recorded over an item's outcome so far (``None``: the item
    is still pending). A pending item takes any result. A job that one runner changed
    and another then found already where the operation puts it (two leaders overlapping
    on a chunk, or the same chunk applied again after a cut-off) is processed, whichever
    of the two recorded first: ``processed`` replaces a recorded ``skipped``. Nothing
    else is recorded twice."""
    if recorded is None:
        return True
    return result == ItemOutcome.PROCESSED and recorded in SUPERSEDED_BY_PROCESSED


#: The recorded outcomes a later ``processed`` result replaces (:func:`replaces`).
SUPERSEDED_BY_PROCESSED = frozenset({ItemOutcome.SKIPPED})


# ------------------------------------------------------------------ the state machine


#: The moves an unfinished operation's state may make besides staying where it is: claimed
#: by a runner, asked to cancel, its scan ended, finished (any final state: the runner
#: fails an operation wherever it is). A final state has none.
_MOVES: Mapping[BatchOpState, frozenset[BatchOpState]] = {
    BatchOpState.PENDING: frozenset({BatchOpState.SCANNING, BatchOpState.CANCELLING})
    | FINAL_STATES,
    BatchOpState.SCANNING: frozenset({BatchOpState.RUNNING, BatchOpState.CANCELLING})
    | FINAL_STATES,
    BatchOpState.RUNNING: frozenset({BatchOpState.CANCELLING}) | FINAL_STATES,
    BatchOpState.CANCELLING: FINAL_STATES,
}


def finishing_state(state: BatchOpState) -> BatchOpState:
    """The state a finish writes: one of :data:`FINAL_STATES`, else ``ValidationError``."""
    if not state.is_final:
        raise ValidationError(
            "state", f"a batch operation finishes completed, cancelled or failed, not {state}"
        )
    return state


def may_move(current: BatchOpState, target: BatchOpState) -> bool:
    """Whether a step may take an operation in ``current`` to ``target`` (and write it).

    An unfinished operation may stay where it is (items added or recorded, a scan ended
    twice) or make one of the moves of its state. A final state is absorbing: nothing
    leaves it and no step writes to it, so a late step of a leader that has lost the lead
    (another finished the operation meanwhile) changes nothing."""
    if current.is_final:
        return False
    return target == current or target in _MOVES[current]


def step_states(step: Callable[[BatchOpState], BatchOpState]) -> frozenset[BatchOpState]:
    """The states in which a step taking an operation from ``s`` to ``step(s)`` may write
    it (:func:`may_move`): the guard an engine puts on the operation's state, in the same
    statement as the write."""
    return frozenset(s for s in BatchOpState if may_move(s, step(s)))


def cancel_requested(state: BatchOpState) -> BatchOpState | None:
    """Where a cancel request takes an operation, or ``None`` if it cannot be cancelled."""
    return BatchOpState.CANCELLING if state in CANCELLABLE_STATES else None


def after_scan(state: BatchOpState) -> BatchOpState:
    """A finished scan starts running, unless a cancel arrived meanwhile."""
    return BatchOpState.CANCELLING if state == BatchOpState.CANCELLING else BatchOpState.RUNNING


def final_state(state: BatchOpState, *, items_left: bool) -> BatchOpState | None:
    """At a chunk boundary: ``cancelled`` if asked to stop, ``completed`` if nothing is
    left, otherwise ``None`` (keep going)."""
    if state == BatchOpState.CANCELLING:
        return BatchOpState.CANCELLED
    if not items_left:
        return BatchOpState.COMPLETED
    return None
