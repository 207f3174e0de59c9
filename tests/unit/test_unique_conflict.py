"""The unique conflict modes' parsing, validation and merge rule (ADR 0034)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa.domain.errors import ValidationError
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.states import JobState
from awa.domain.unique import UniqueOpts
from awa.domain.unique_conflict import (
    SKIP,
    UNIQUE_CONFLICT_METADATA,
    ConflictMode,
    InsertOutcome,
    conflict_mode_of,
    first_run_at,
    insert_outcome,
    mergeable,
    merged,
    parse_on_conflict,
    with_conflict_mode,
)
from awa.entrypoints.args import build_spec

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_three_modes_parse() -> None:
    assert parse_on_conflict(None) == SKIP
    assert parse_on_conflict("skip") == SKIP
    assert parse_on_conflict("replace") == ConflictMode("replace")
    assert parse_on_conflict({"debounce": 5, "max_wait": 60}) == ConflictMode("debounce", 5.0, 60.0)
    assert UniqueOpts.from_dict({"on_conflict": "replace"}).on_conflict.merges


@pytest.mark.parametrize(
    ("value", "field", "says"),
    [
        ("upsert", "unique_opts.on_conflict", "unknown mode 'upsert'"),
        (3, "unique_opts.on_conflict", "got int"),
        ({"debounce": 5}, "unique_opts.on_conflict.max_wait", "is required"),
        ({"max_wait": 5}, "unique_opts.on_conflict", "a debounce is"),
        ({"debounce": 5, "max_wait": 9, "x": 1}, "unique_opts.on_conflict", "unknown keys"),
        ({"debounce": 0, "max_wait": 9}, "unique_opts.on_conflict.debounce", "positive"),
        ({"debounce": -1, "max_wait": 9}, "unique_opts.on_conflict.debounce", "positive"),
        ({"debounce": math.nan, "max_wait": 9}, "unique_opts.on_conflict.debounce", "positive"),
        ({"debounce": math.inf, "max_wait": 9}, "unique_opts.on_conflict.debounce", "positive"),
        ({"debounce": True, "max_wait": 9}, "unique_opts.on_conflict.debounce", "number"),
        ({"debounce": "5", "max_wait": 9}, "unique_opts.on_conflict.debounce", "number"),
        ({"debounce": 10, "max_wait": 5}, "unique_opts.on_conflict.max_wait", "at least"),
        ({"debounce": 10, "max_wait": 1e9}, "unique_opts.on_conflict.max_wait", "30 days"),
    ],
)
def test_bad_modes_are_refused_naming_the_field(value: Any, field: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_on_conflict(value)
    assert refused.value.field == field
    assert says in str(refused.value)
    # The client refuses it before anything is written.
    with pytest.raises(ValidationError):
        build_spec({"n": 1}, kind="k", unique_opts={"on_conflict": value})


def test_the_mode_rides_in_the_metadata_and_skip_stores_nothing() -> None:
    spec = build_spec({"n": 1}, kind="k", unique_opts={"on_conflict": "replace"})
    assert spec.metadata[UNIQUE_CONFLICT_METADATA] == {"on_conflict": "replace", "inserts": 1}
    assert conflict_mode_of(spec.metadata) == ConflictMode("replace")
    plain = build_spec({"n": 1}, kind="k", unique_opts={}, metadata={UNIQUE_CONFLICT_METADATA: 1})
    assert UNIQUE_CONFLICT_METADATA not in plain.metadata
    debounce = ConflictMode("debounce", 2.0, 4.0)
    assert conflict_mode_of(with_conflict_mode({}, debounce)) == debounce
    with pytest.raises(ValidationError):
        conflict_mode_of({UNIQUE_CONFLICT_METADATA: {"on_conflict": "nope"}})


def test_a_debounce_waits_its_window_unless_told_when() -> None:
    mode = ConflictMode("debounce", 5.0, 50.0)
    assert first_run_at(mode, None, NOW) == NOW + timedelta(seconds=5)
    assert first_run_at(mode, NOW, NOW + timedelta(hours=1)) == NOW
    assert first_run_at(ConflictMode("replace"), None, NOW) is None


def test_only_waiting_jobs_not_waiting_on_parents_merge() -> None:
    assert mergeable(JobState.Scheduled, False) and mergeable(JobState.Available, False)
    assert not mergeable(JobState.Scheduled, True)
    for state in set(JobState) - {JobState.Scheduled, JobState.Available}:
        assert not mergeable(state, False)


def _merge(mode: ConflictMode, created: datetime, now: datetime, **kw: Any) -> Any:
    return merged(
        holder_metadata=kw.pop("holder", with_conflict_mode({}, mode)),
        holder_created_at=created,
        mode=mode,
        args={"n": 2},
        run_at=kw.pop("run_at", None),
        priority=1,
        tags=("t",),
        metadata=kw.pop("metadata", with_conflict_mode({"m": 1}, mode)),
        now=now,
    )


def test_debounce_moves_run_at_to_now_plus_window_capped_at_max_wait() -> None:
    mode = ConflictMode("debounce", 10.0, 30.0)
    early = _merge(mode, NOW, NOW + timedelta(seconds=5))
    assert early.run_at == NOW + timedelta(seconds=15) and early.state == JobState.Scheduled
    late = _merge(mode, NOW, NOW + timedelta(seconds=25))
    assert late.run_at == NOW + timedelta(seconds=30)
    overdue = _merge(mode, NOW, NOW + timedelta(seconds=45))
    assert overdue.run_at == NOW + timedelta(seconds=30) and overdue.state == JobState.Available
    assert overdue.args == {"n": 2} and overdue.priority == 1 and overdue.tags == ("t",)
    assert insert_outcome(overdue.metadata) == InsertOutcome.DEBOUNCED


def test_replace_takes_run_at_or_now_and_keeps_the_holders_concurrency_key() -> None:
    mode = ConflictMode("replace")
    holder = {**with_conflict_mode({}, mode), CONCURRENCY_KEY_METADATA: "t-1"}
    later = NOW + timedelta(minutes=1)
    change = _merge(
        mode,
        NOW,
        NOW,
        holder=holder,
        run_at=later,
        metadata={CONCURRENCY_KEY_METADATA: "t-2", **with_conflict_mode({}, mode)},
    )
    assert change.run_at == later and change.state == JobState.Scheduled
    assert change.metadata[CONCURRENCY_KEY_METADATA] == "t-1"
    assert change.metadata[UNIQUE_CONFLICT_METADATA]["inserts"] == 2
    assert insert_outcome(change.metadata) == InsertOutcome.REPLACED
    now = _merge(mode, NOW, NOW)
    assert now.run_at == NOW and now.state == JobState.Available
    assert insert_outcome(with_conflict_mode({}, mode)) == InsertOutcome.INSERTED
    assert insert_outcome({}) == InsertOutcome.INSERTED
