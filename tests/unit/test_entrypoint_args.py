"""Spec building: options shared by a batch are validated once, every job's args are
still checked and every job derives its own kind; plain args are converted and checked in
one pass with exactly the results and errors of the two separate steps."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from awa.domain.errors import ValidationError
from awa.domain.validation import validate_json, validate_spec
from awa.entrypoints.args import _serialize_plain, build_spec, build_specs, serialize_args


@dataclass
class SendEmail:
    to: str


@dataclass
class ResizeImage:
    width: float


def test_bulk_specs_equal_one_by_one_specs() -> None:
    jobs = [SendEmail(to="a"), ResizeImage(width=2.0), {"x": [1, 2]}]
    common: dict[str, Any] = {"queue": "q", "priority": 3, "tags": ["t"], "metadata": {"m": 1}}
    assert build_specs(jobs, kind=None, **common) == [build_spec(job, **common) for job in jobs]
    # A per-job override still goes through the full path.
    specs = build_specs(jobs, opts=[None, {"queue": "other"}, None], **common)
    assert [spec.queue for spec in specs] == ["q", "other", "q"]
    assert [spec.kind for spec in specs] == ["send_email", "resize_image", "dict"]


def test_every_job_of_a_batch_is_validated() -> None:
    with pytest.raises(ValidationError) as bad:
        build_specs([SendEmail(to="a"), ResizeImage(width=float("nan"))], queue="q")
    assert bad.value.field == "args"
    with pytest.raises(ValidationError) as bad_kind:
        build_specs([SendEmail(to="a"), {"x": 1}], queue="q", kind="")
    assert bad_kind.value.field == "kind"
    # Shared options are validated even when only the first job uses them.
    with pytest.raises(ValidationError) as bad_priority:
        build_specs([SendEmail(to="a"), SendEmail(to="b")], priority=9)
    assert bad_priority.value.field == "priority"


class Level(enum.IntEnum):
    LOW = 1


@dataclass
class Flat:
    a: Any
    b: Any = None


def _two_steps(args: Any, kind: str | None) -> tuple[str, Any]:
    resolved, payload = serialize_args(args, kind)
    return resolved, validate_json("args", payload)


def _outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except ValidationError as exc:
        return "error", exc.field, str(exc)


class _Opaque:
    """A value no serializer knows, with a repr that is the same in every process (test
    ids must match across pytest-xdist workers)."""

    def __repr__(self) -> str:
        return "<opaque>"


ARG_VALUES: list[Any] = [
    "text",
    "",
    7,
    True,
    None,
    1.5,
    -0.0,
    float("nan"),
    float("inf"),
    "nul\x00inside",
    Level.LOW,
    [1, float("nan")],
    {"nested": "\x00"},
    datetime(2026, 1, 2, tzinfo=UTC),
    _Opaque(),
    b"raw",
]


@pytest.mark.parametrize("value", ARG_VALUES, ids=repr)
@pytest.mark.parametrize("kind", [None, "explicit"])
def test_args_checked_in_one_pass_match_the_two_steps(value: Any, kind: str | None) -> None:
    """Plain args take one pass (converted and checked together); every other value and
    every refusal comes out exactly as serialize_args followed by validate_json gives it,
    through build_spec and build_specs alike."""
    shapes: list[Any] = [Flat(a=value), Flat(a=1.0, b=value), {"a": value}, {"a": 1, "b": value}]
    shapes += [{1: value}, {"k\x00": value}, {"k": "v", 2: value}]
    for args in shapes:
        expected = _outcome(_two_steps, args, kind)
        plain = _serialize_plain(args, kind)
        if plain is not None:
            assert plain == expected
        spec = _outcome(build_spec, args, kind=kind)
        specs = _outcome(build_specs, [Flat(a=1), args], kind=kind)
        if expected[0] == "error":
            assert spec == expected and specs == expected
        else:
            assert (spec.kind, spec.args) == expected
            assert (specs[1].kind, specs[1].args) == expected


def test_one_pass_args_are_a_copy_with_the_same_types() -> None:
    args = {"a": 1, "b": "x"}
    assert _serialize_plain(args, None) == ("dict", args)
    assert build_spec(args).args is not args
    assert _serialize_plain(Flat(a=True), None) == ("flat", {"a": True, "b": None})
    assert _serialize_plain(Flat(a=Level.LOW), None) is None  # to_json_value keeps it


def test_build_spec_reports_the_same_field_first() -> None:
    """Checks run once, in validate_spec's order after the option checks: a bad option
    is reported before bad args, args before metadata."""
    nan = float("nan")
    cases: list[tuple[dict[str, Any], Any, str]] = [
        ({"priority": 9}, Flat(a=nan), "priority"),
        ({"queue": ""}, {"a": "\x00"}, "queue"),
        ({"tags": [1]}, Flat(a=nan), "tags"),
        ({"metadata": {"m": nan}}, Flat(a=nan), "args"),
        ({"metadata": {"m": nan}}, Flat(a=1), "metadata"),
        ({"run_at": "nonsense"}, Flat(a=nan), "run_at"),
        ({"unique_opts": {"states": 999}}, Flat(a=nan), "unique_opts.states"),
        ({}, Flat(a=[nan]), "args"),
    ]
    for options, args, field in cases:
        with pytest.raises(ValidationError) as bad:
            build_spec(args, **options)
        assert bad.value.field == field, (options, args)
    # A spec that passes is valid as it stands (the engines do not check it again).
    spec = build_spec(Flat(a=1.5), queue="q", metadata={"m": [1]}, tags=["t"])
    assert validate_spec(spec) == spec
