"""Input validation: every refusal names the offending field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from awa.domain import AwaError, JobSpec, ValidationError, validate_spec
from awa.domain.validation import (
    json_dumps,
    validate_json,
    validate_kind,
    validate_name,
    validate_queue,
    validate_tags,
)


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


@pytest.mark.parametrize(
    ("field", "name", "rule"),
    [
        ("queue", "a/b", "'/'"),
        ("queue", " ", "blank"),
        ("queue", "\u3000\u00a0", "blank"),
        ("queue", "a\nb", "U+000A"),
        ("queue", "pay\u202eusd", "U+202E"),
        ("queue", "a\u2066b", "U+2066"),
        ("queue", "a#b", "'#'"),
        ("queue", ".", "'.'"),
        ("queue", "..", "'..'"),
        ("queue", "mail ", "space"),
        ("kind", "send\x01", "U+0001"),
        ("kind", "a\u00adb", "U+00AD"),
        ("kind", "\t", "U+0009"),
        ("kind", " k", "space"),
    ],
)
def test_unreachable_names_are_refused_naming_the_rule(field: str, name: str, rule: str) -> None:
    spec = JobSpec(
        kind=name if field == "kind" else "k", args={}, queue=name if field == "queue" else "q"
    )
    with pytest.raises(ValidationError) as info:
        validate_spec(spec)
    assert info.value.field == field and rule in str(info.value)


def test_sane_names_stay_accepted_and_engine_stripes_pass() -> None:
    for queue in ("mail", "a b", "é", "reports.v2", "x:y", "a.b", "...", "q__p1", "Ω-1"):
        validate_queue(queue)
    for kind in ("a/b", "a#1", "send_email", "Mail.Send v2"):  # kinds live in no URL path
        validate_kind(kind)
    # The engine renames a job to a stripe of its queue and checks the spec again.
    assert validate_spec(JobSpec(kind="k", args={}, queue="email#3")).queue == "email#3"
    with pytest.raises(ValidationError, match="'#'"):
        validate_queue("email#3")  # but a producer may not name a stripe itself
    with pytest.raises(ValidationError, match="'#'"):
        validate_spec(JobSpec(kind="k", args={}, queue="a#b#3"))


def test_the_unprintable_ranges_are_the_unicode_categories() -> None:
    """``UNPRINTABLE_RANGES`` (which the SQL rule mirrors) is exactly Cc, Cf, Zl and Zp of
    Unicode 14 (Python 3.11's), and ``SPACE_RANGES`` the other spaces."""
    import unicodedata

    from awa.domain.validation import SPACE_RANGES, UNPRINTABLE_RANGES

    def expand(ranges: tuple[tuple[int, int], ...]) -> set[int]:
        return {c for low, high in ranges for c in range(low, high + 1)}

    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    hidden = {"Cc", "Cf", "Zl", "Zp"}
    found = {c for c in points if unicodedata.category(chr(c)) in hidden}
    if unicodedata.unidata_version == "14.0.0":  # the version the ranges were taken from
        assert expand(UNPRINTABLE_RANGES) == found
    else:  # later versions only add characters (a fixed rule, the same in SQL)
        assert expand(UNPRINTABLE_RANGES) <= found
    assert expand(SPACE_RANGES) == {
        c for c in points if chr(c).isspace() and unicodedata.category(chr(c)) not in hidden
    }
