"""Inputs that used to slip through (or fail with an internal error) are refused with an
error naming the field, before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from awa.domain.errors import ValidationError
from awa.domain.handler_results import RetryAfter, Snooze
from awa.domain.validation import (
    MAX_RUN_AT,
    MIN_RUN_AT,
    storable_text,
    validate_number,
    validate_run_at,
)
from awa.entrypoints.args import build_spec, build_specs


def _field(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ValidationError) as info:
        call(*args, **kwargs)
    assert str(info.value).startswith(info.value.field + ":")
    return info.value.field


def test_a_string_for_tags_is_refused_not_split_into_letters() -> None:
    assert _field(build_spec, {"a": 1}, kind="k", tags="urgent") == "tags"
    assert _field(build_spec, {"a": 1}, kind="k", tags=b"urgent") == "tags"
    assert _field(build_spec, {"a": 1}, kind="k", tags=7) == "tags"
    assert build_spec({"a": 1}, kind="k", tags=("urgent",)).tags == ("urgent",)


@pytest.mark.parametrize(
    "args", [{1: "a"}, {"nested": {2.5: "b"}}, {"list": [{None: 1}]}, {(1, 2): "t"}]
)
def test_non_string_keys_in_args_are_refused(args: dict[Any, Any]) -> None:
    assert _field(build_spec, args, kind="k") == "args"


def test_non_string_keys_in_metadata_are_refused() -> None:
    assert _field(build_spec, {"a": 1}, kind="k", metadata={1: "x"}) == "metadata"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"args": {"s": "\ud800"}}, "args"),
        ({"args": {"\udfff": 1}}, "args"),
        ({"args": {"deep": ["x", {"y": "\ud83d"}]}}, "args"),
        ({"tags": ["ok", "\udc00"]}, "tags"),
        ({"metadata": {"m": "\ud800"}}, "metadata"),
        ({"queue": "q\ud800"}, "queue"),
        ({"kind": "k\ud800"}, "kind"),
    ],
)
def test_lone_surrogates_are_refused_with_the_field(options: dict[str, Any], field: str) -> None:
    args = options.pop("args", {"a": 1})
    options.setdefault("kind", "k")
    assert _field(build_spec, args, **options) == field


def test_bulk_inserts_check_every_job_and_the_shared_tags() -> None:
    assert _field(build_specs, [{"a": 1}, {"a": "\ud800"}], kind="k") == "args"
    assert _field(build_specs, [{"a": 1}, {"a": 2}], kind="k", tags=["\ud800"]) == "tags"
    assert _field(build_specs, [{"a": 1}], kind="k", tags="urgent") == "tags"


def test_self_referencing_args_are_refused_not_a_recursion_error() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    listed: list[Any] = []
    listed.append(listed)
    assert _field(build_spec, looped, kind="k") == "args"
    assert _field(build_spec, {"l": listed}, kind="k") == "args"
    assert _field(build_spec, {"a": 1}, kind="k", metadata={"l": listed}) == "metadata"


def test_by_period_must_fit_in_64_bits() -> None:
    for bucket in (2**63, -(2**63), -5, 2**70):
        field = _field(build_spec, {"a": 1}, kind="k", unique_opts={"by_period": bucket})
        assert field == "unique_opts.by_period"
    for bucket in (2**63 - 1, 0):
        assert build_spec({"a": 1}, kind="k", unique_opts={"by_period": bucket}).unique_key


@pytest.mark.parametrize(
    "run_at",
    [
        datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))),
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-01:00",
    ],
)
def test_run_at_outside_what_python_reads_back_is_refused(run_at: Any) -> None:
    assert _field(build_spec, {"a": 1}, kind="k", run_at=run_at) == "run_at"


def test_the_run_at_bounds_are_accepted() -> None:
    assert validate_run_at(MIN_RUN_AT) == MIN_RUN_AT
    assert validate_run_at(MAX_RUN_AT) == MAX_RUN_AT
    plus_one = datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert build_spec({"a": 1}, kind="k", run_at=plus_one).run_at == plus_one
    assert _field(validate_run_at, datetime(2026, 1, 1)) == "run_at"
    assert MIN_RUN_AT.tzinfo is UTC


@pytest.mark.parametrize("seconds", [3e11, 10**30, float("inf"), float("nan"), -1])
def test_delays_no_timestamp_can_hold_are_refused_when_built(seconds: Any) -> None:
    with pytest.raises(ValidationError) as info:
        Snooze(seconds)
    assert info.value.field == "seconds" and isinstance(info.value, ValueError)
    with pytest.raises(ValueError):
        RetryAfter(seconds)
    with pytest.raises(TypeError):
        Snooze("5")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_numbers_must_be_finite(value: float) -> None:
    assert _field(validate_number, "timeout_ms", value) == "timeout_ms"
    assert _field(validate_number, "timeout_seconds", 0, positive=True) == "timeout_seconds"


def test_storable_text_escapes_what_postgres_refuses() -> None:
    assert storable_text("a\x00b") == "a\\x00b"
    assert storable_text("x\ud800y") == "x\\ud800y"
    assert storable_text("plain é ✓") == "plain é ✓"
    assert storable_text("a\x00b\udfff").encode()


def test_job_ids_and_text_arguments_are_checked_before_the_database() -> None:
    from awa.domain.errors import ValidationTypeError
    from awa.domain.validation import validate_job_id, validate_text

    for bad in ("abc", "1", 1.5, True, None):
        with pytest.raises(ValidationTypeError) as info:
            validate_job_id(bad)
        assert info.value.field == "job_id"
    for bad_id in (-(2**63) - 1, 2**63, 2**70):
        with pytest.raises(ValidationError, match="64-bit"):
            validate_job_id(bad_id)
    assert validate_job_id(2**63 - 1) == 2**63 - 1 and validate_job_id(0) == 0
    with pytest.raises(ValidationError, match="NUL") as nul:
        validate_text("queue", "a\x00b")
    assert nul.value.field == "queue"
