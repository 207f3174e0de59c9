"""What an insert does when a waiting job already holds its unique key (ADR 0034).

``unique_opts={..., "on_conflict": mode}`` picks one of three modes:

- ``"skip"`` (the default, awa-pg's behaviour): the insert raises ``UniqueConflict`` (a
  bulk insert leaves the job out); nothing changes.
- ``"replace"``: the waiting job takes the new insert's args, ``run_at`` (absent: now),
  priority, tags and metadata, and the insert returns it.
- ``{"debounce": window, "max_wait": max_wait}`` (seconds): the first insert runs
  ``window`` from now (unless it names its ``run_at``); each later insert gives the
  waiting job its args, priority, tags and metadata and pushes its ``run_at`` out to
  ``now + window``, never past ``created_at + max_wait`` (the first insert's time).

Only a *waiting* holder is changed: ``scheduled`` or ``available``, and not waiting on
parents (ADR 0032). A holder that runs, waits for a callback, waits for a retry or has
finished is left alone and the insert behaves as ``skip``. Every merge keeps the holder's
id, kind, queue, unique key, state mask, ``max_attempts``, ordering key and concurrency
key (the last two place the job; changing them is not a merge but a new job).

The mode travels in the job's metadata under :data:`UNIQUE_CONFLICT_METADATA`, as the
concurrency key does (ADR 0029), so every insert path (the clients, COPY, the routing
engine, ``awa.bridge`` and the SQL producer ``awa.insert_job_compat``) carries it without
a new column or parameter, and the job row says how many inserts it absorbed
(``"inserts"``): 1 for a job its insert created, more for one a later insert merged
into. That count is how an insert tells its caller what happened
(:func:`insert_outcome`, ``Job.insert_outcome``).

The merge rule is :func:`merged`; the Postgres engines apply the same rule in
``awa.unique_conflict_merge`` (one SQL function for both of them and the SQL producer),
held equal to this one by the contract suite and the model-vs-real machine.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.states import JobState

#: The metadata key a job keeps its conflict mode and insert count under.
UNIQUE_CONFLICT_METADATA = "awa:unique_conflict"

#: The longest debounce window or ``max_wait``: 30 days (a debounce longer than that is a
#: schedule, and the bound keeps ``created_at + max_wait`` far from timestamp limits).
MAX_DEBOUNCE_SECONDS = 30 * 24 * 3600.0

#: The states of a holder an insert may change: it has not started.
MERGEABLE_STATES: frozenset[JobState] = frozenset({JobState.Scheduled, JobState.Available})


class InsertOutcome(enum.StrEnum):
    """What an insert did: the job is new, or a waiting job took the insert."""

    INSERTED = "inserted"
    REPLACED = "replaced"
    DEBOUNCED = "debounced"


@attrs.frozen
class ConflictMode:
    """A parsed ``on_conflict``: ``mode`` is ``"skip"``, ``"replace"`` or ``"debounce"``;
    ``window`` and ``max_wait`` (seconds) only for debounce."""

    mode: str = "skip"
    window: float | None = None
    max_wait: float | None = None

    @property
    def merges(self) -> bool:
        """Whether a waiting holder takes the insert (``replace`` or ``debounce``)."""
        return self.mode != "skip"

    def as_metadata(self, inserts: int = 1) -> dict[str, Any]:
        """The value stored under :data:`UNIQUE_CONFLICT_METADATA`."""
        value: dict[str, Any] = {"on_conflict": self.mode, "inserts": inserts}
        if self.mode == "debounce":
            value["window"] = self.window
            value["max_wait"] = self.max_wait
        return value


SKIP = ConflictMode()

_FIELD = "unique_opts.on_conflict"


def parse_on_conflict(value: Any) -> ConflictMode:
    """``unique_opts["on_conflict"]``: ``"skip"``, ``"replace"`` or
    ``{"debounce": seconds, "max_wait": seconds}``; anything else is a ``ValidationError``
    naming the field."""
    if value is None or value == "skip":
        return SKIP
    if value == "replace":
        return ConflictMode("replace")
    if isinstance(value, str):
        raise ValidationError(
            _FIELD,
            f"unknown mode {value!r}: use 'skip', 'replace' or "
            "{'debounce': seconds, 'max_wait': seconds}",
        )
    if not isinstance(value, Mapping):
        raise ValidationTypeError(
            _FIELD,
            "must be 'skip', 'replace' or {'debounce': seconds, 'max_wait': seconds}, "
            f"got {type(value).__name__}",
        )
    unknown = set(value) - {"debounce", "max_wait"}
    if unknown or "debounce" not in value:
        raise ValidationError(
            _FIELD,
            "a debounce is {'debounce': seconds, 'max_wait': seconds}"
            + (f"; unknown keys: {sorted(map(str, unknown))}" if unknown else ""),
        )
    if "max_wait" not in value:
        raise ValidationError(
            f"{_FIELD}.max_wait",
            "is required: without it a steady stream of inserts would never let the job run",
        )
    window = _seconds(value["debounce"], f"{_FIELD}.debounce")
    max_wait = _seconds(value["max_wait"], f"{_FIELD}.max_wait")
    if max_wait < window:
        raise ValidationError(
            f"{_FIELD}.max_wait",
            f"must be at least the debounce window ({window:g} s), got {max_wait:g} s",
        )
    return ConflictMode("debounce", window, max_wait)


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationTypeError(
            field, f"must be a number of seconds, got {type(value).__name__}", value=value
        )
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValidationError(field, f"must be a positive number of seconds, got {value!r}")
    if seconds > MAX_DEBOUNCE_SECONDS:
        raise ValidationError(
            field, f"must be at most {MAX_DEBOUNCE_SECONDS:g} seconds (30 days), got {value!r}"
        )
    return seconds


def with_conflict_mode(metadata: Mapping[str, Any], mode: ConflictMode) -> dict[str, Any]:
    """``metadata`` carrying ``mode`` (``skip`` stores nothing: today's jobs unchanged)."""
    out = dict(metadata)
    out.pop(UNIQUE_CONFLICT_METADATA, None)
    if mode.merges:
        out[UNIQUE_CONFLICT_METADATA] = mode.as_metadata()
    return out


def conflict_mode_of(metadata: Mapping[str, Any]) -> ConflictMode:
    """The mode a job's metadata carries (``SKIP`` when none); a malformed entry (written
    by hand through SQL) is refused as the client would refuse it."""
    stored = metadata.get(UNIQUE_CONFLICT_METADATA)
    if stored is None:
        return SKIP
    if not isinstance(stored, Mapping):
        raise ValidationError(UNIQUE_CONFLICT_METADATA, "must be a JSON object")
    mode = stored.get("on_conflict")
    if mode == "debounce":
        return parse_on_conflict(
            {"debounce": stored.get("window"), "max_wait": stored.get("max_wait")}
        )
    return parse_on_conflict(mode)


def inserts_of(metadata: Mapping[str, Any]) -> int:
    """How many inserts the job absorbed (1 for one its own insert created)."""
    stored = metadata.get(UNIQUE_CONFLICT_METADATA)
    if isinstance(stored, Mapping):
        count = stored.get("inserts")
        if isinstance(count, int) and not isinstance(count, bool):
            return count
    return 1


def insert_outcome(metadata: Mapping[str, Any]) -> InsertOutcome:
    """What the insert that returned a job with this metadata did."""
    if inserts_of(metadata) <= 1:
        return InsertOutcome.INSERTED
    if conflict_mode_of(metadata).mode == "debounce":
        return InsertOutcome.DEBOUNCED
    return InsertOutcome.REPLACED


def first_run_at(mode: ConflictMode, run_at: datetime | None, now: datetime) -> datetime | None:
    """The ``run_at`` a new job of ``mode`` is inserted with: a debounce waits its window
    unless the insert named its own time."""
    if mode.mode == "debounce" and run_at is None:
        assert mode.window is not None
        return now + timedelta(seconds=mode.window)
    return run_at


def mergeable(state: JobState, waiting_on_parents: bool) -> bool:
    """Whether a holder in ``state`` takes a ``replace``/``debounce`` insert."""
    return state in MERGEABLE_STATES and not waiting_on_parents


@attrs.frozen
class Merge:
    """The holder's new fields after it took an insert."""

    args: Any
    run_at: datetime
    state: JobState
    priority: int
    tags: tuple[str, ...]
    metadata: dict[str, Any]


def merged(
    *,
    holder_metadata: Mapping[str, Any],
    holder_created_at: datetime,
    mode: ConflictMode,
    args: Any,
    run_at: datetime | None,
    priority: int,
    tags: tuple[str, ...],
    metadata: Mapping[str, Any],
    now: datetime,
) -> Merge:
    """The waiting holder after it took an insert of ``mode`` (the new insert's mode,
    args, run_at, priority, tags and metadata); ``now`` is the inserting engine's time."""
    if mode.mode == "debounce":
        assert mode.window is not None and mode.max_wait is not None
        when = min(
            now + timedelta(seconds=mode.window),
            holder_created_at + timedelta(seconds=mode.max_wait),
        )
    else:
        when = now if run_at is None else run_at
    meta = {k: v for k, v in metadata.items() if k != CONCURRENCY_KEY_METADATA}
    if CONCURRENCY_KEY_METADATA in holder_metadata:
        meta[CONCURRENCY_KEY_METADATA] = holder_metadata[CONCURRENCY_KEY_METADATA]
    meta[UNIQUE_CONFLICT_METADATA] = mode.as_metadata(inserts_of(holder_metadata) + 1)
    return Merge(
        args=args,
        run_at=when,
        state=JobState.Scheduled if when > now else JobState.Available,
        priority=priority,
        tags=tags,
        metadata=meta,
    )
