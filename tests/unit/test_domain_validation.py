"""Input validation: every refusal names the offending field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from awa.domain import AwaError, JobSpec, ValidationError, validate_spec
from awa.domain.validation import json_dumps, validate_json, validate_name, validate_tags


def _spec(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {"kind": "send_email", "args": {"to": "a@example.com"}}
    fields.update(overrides)
    return JobSpec(**fields)


def _field_of(spec: JobSpec) -> str:
    with pytest.raises(ValidationError) as info:
        validate_spec(spec)
    assert info.value.field in str(info.value)
    return info.value.field


def test_a_valid_spec_is_returned_unchanged() -> None:
    spec = _spec(priority=4, max_attempts=1000, tags=["a"] * 20, queue="q" * 200)
    assert validate_spec(spec) is spec


def test_boundaries_are_accepted() -> None:
    for priority in (1, 4):
        validate_spec(_spec(priority=priority))
    for attempts in (1, 1000):
        validate_spec(_spec(max_attempts=attempts))
    validate_spec(_spec(kind="k" * 200))


def test_validation_error_is_an_awa_error_and_a_value_error() -> None:
    with pytest.raises(ValidationError) as info:
        validate_spec(_spec(priority=0))
    assert isinstance(info.value, AwaError)
    assert isinstance(info.value, ValueError)
    assert info.value.value == 0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"priority": 0}, "priority"),
        ({"priority": 5}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 2.0}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"kind": "k" * 201}, "kind"),
        ({"kind": ""}, "kind"),
        ({"kind": "send\x00email"}, "kind"),
        ({"queue": "q" * 201}, "queue"),
        ({"queue": "q\x00"}, "queue"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"tags": ["ok", "bad\x00tag"]}, "tags"),
        ({"tags": ["t" * 201]}, "tags"),
        ({"tags": [1]}, "tags"),
        ({"args": {"to": "a\x00b"}}, "args"),
        ({"args": {"k\x00": 1}}, "args"),
        ({"args": {"x": float("nan")}}, "args"),
        ({"args": [float("inf")]}, "args"),
        ({"args": {1: "non-str key"}}, "args"),
        ({"args": {"when": datetime(2030, 1, 1, tzinfo=UTC)}}, "args"),
        ({"metadata": {"m": "x\x00"}}, "metadata"),
        ({"metadata": {"m": float("-inf")}}, "metadata"),
        ({"metadata": {("tuple",): 1}}, "metadata"),
        ({"unique_states": 256}, "unique_opts.states"),
        ({"unique_key": "not-bytes"}, "unique_key"),
        ({"ordering_key": "not-bytes"}, "ordering_key"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at"),
    ],
)
def test_each_bad_field_is_named(overrides: dict[str, Any], field: str) -> None:
    assert _field_of(_spec(**overrides)) == field


def test_kind_must_be_a_string() -> None:
    assert _field_of(_spec(kind=3)) == "kind"


def test_first_bad_field_wins_in_declared_order() -> None:
    assert _field_of(_spec(kind="", priority=0, max_attempts=0)) == "kind"
    assert _field_of(_spec(priority=0, max_attempts=0)) == "priority"


def test_deep_nesting_is_refused() -> None:
    value: Any = "leaf"
    for _ in range(102):
        value = [value]
    with pytest.raises(ValidationError, match="nested too deeply"):
        validate_json("args", value)


def test_json_accepts_plain_values() -> None:
    value = {"a": [1, 2.5, None, True, "x"], "b": {"c": ()}}
    assert validate_json("args", value) is value


def test_validate_name_and_tags_helpers() -> None:
    assert validate_name("queue", "emails") == "emails"
    assert validate_tags(iter(["a", "b"])) == ("a", "b")


def test_names_with_a_lone_surrogate_are_refused() -> None:
    assert validate_name("queue", "émails") == "émails"
    with pytest.raises(ValidationError, match="queue: must be valid Unicode text"):
        validate_name("queue", "bad\ud800")


def test_json_dumps_is_compact_and_refuses_nan() -> None:
    assert json_dumps("args", {"a": [1, 2]}) == '{"a":[1,2]}'
    with pytest.raises(ValidationError) as info:
        json_dumps("metadata", {"x": float("nan")})
    assert info.value.field == "metadata"
