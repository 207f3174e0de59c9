"""CEL callback expressions: checking at registration and the resolution decision,
with the cases observed on awa-pg 0.6.9."""

from __future__ import annotations

from typing import Any

import pytest

from awa.domain.callbacks import (
    DEFAULT_FAILED,
    FILTER_REJECTED,
    NOTHING_MATCHED,
    ON_FAIL_MATCHED,
    CallbackExpressions,
    Resolution,
    decide_resolution,
)
from awa.domain.errors import ValidationError
from awa.entrypoints import cel


def _resolve(payload: Any, default_action: str = "ignore", **fields: str) -> Resolution:
    expressions = cel.compile_expressions(**fields)

    def transformed(expression: str) -> Any:
        try:
            return cel.evaluate(expression, payload)
        except cel.EvaluationFailed:
            return payload

    return decide_resolution(
        expressions,
        payload,
        matched=lambda e: cel.matches(e, payload),
        transformed=transformed,
        default_action=default_action,
    )


@pytest.mark.parametrize(
    ("fields", "payload", "default", "expected"),
    [
        ({"on_complete": 'payload.status == "ok"'}, {"status": "ok"}, "ignore",
         Resolution("complete", payload={"status": "ok"})),
        ({"on_complete": 'payload.status == "ok"'}, {"status": "bad"}, "ignore",
         Resolution("ignore", reason=NOTHING_MATCHED)),
        ({"on_complete": 'payload.status == "ok"'}, {"status": "bad"}, "fail",
         Resolution("fail", error=DEFAULT_FAILED)),
        ({"on_complete": 'payload.status == "ok"'}, {"status": "bad"}, "complete",
         Resolution("complete", payload={"status": "bad"})),
        ({"on_fail": 'payload.status == "err"', "on_complete": "true"}, {"status": "err"},
         "ignore", Resolution("fail", error=ON_FAIL_MATCHED, expression='payload.status == "err"')),
        ({"filter": 'payload.kind == "x"', "on_complete": "true"}, {"kind": "y"}, "complete",
         Resolution("ignore", reason=FILTER_REJECTED)),
        ({"filter": 'payload.kind == "x"', "on_complete": "true"}, {"kind": "x"}, "ignore",
         Resolution("complete", payload={"kind": "x"})),
        ({"on_complete": "true", "transform": "payload.n"}, {"n": 21}, "ignore",
         Resolution("complete", payload=21)),
        ({"on_complete": "true", "transform": '{"v": payload.n}'}, {"n": 21}, "ignore",
         Resolution("complete", payload={"v": 21})),
        ({"on_complete": "true", "transform": "payload.n / 0"}, {"n": 1}, "ignore",
         Resolution("complete", payload={"n": 1})),
        ({"on_complete": "payload.missing == 1"}, {"n": 1}, "ignore",
         Resolution("ignore", reason=NOTHING_MATCHED)),
        ({"on_complete": "payload.n"}, {"n": 1}, "ignore",
         Resolution("ignore", reason=NOTHING_MATCHED)),
        ({"on_complete": "payload.n > 1"}, None, "ignore",
         Resolution("ignore", reason=NOTHING_MATCHED)),
        ({"on_complete": "size(payload.items) > 1"}, {"items": [1, 2, 3]}, "ignore",
         Resolution("complete", payload={"items": [1, 2, 3]})),
        ({"on_complete": 'payload.x.startsWith("a") && has(payload.x)'}, {"x": "abc"}, "ignore",
         Resolution("complete", payload={"x": "abc"})),
        ({"transform": "payload.n"}, {"n": 1}, "ignore",
         Resolution("ignore", reason=NOTHING_MATCHED)),
    ],
)  # fmt: skip
def test_resolution_follows_awa_pg(
    fields: dict[str, str], payload: Any, default: str, expected: Resolution
) -> None:
    assert _resolve(payload, default, **fields) == expected


def test_expressions_are_checked_at_registration() -> None:
    with pytest.raises(ValidationError, match="undeclared variable\\(s\\): now; only 'payload'"):
        cel.compile_expressions(on_complete='timestamp("2020-01-01T00:00:00Z") < now')
    with pytest.raises(ValidationError, match="undeclared variable\\(s\\): job"):
        cel.compile_expressions(filter="job.id > 0")
    with pytest.raises(ValidationError, match="invalid CEL expression for on_complete"):
        cel.compile_expressions(on_complete="payload.")
    assert cel.compile_expressions() == CallbackExpressions()
    assert cel.compile_expressions(on_fail="true").on_fail == "true"


def test_an_unknown_default_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown default_action: retry"):
        _resolve({}, "retry")
