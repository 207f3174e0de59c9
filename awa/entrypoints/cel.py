"""CEL (Common Expression Language) for callback resolution, through ``celpy``
(cel-python; ADR 0004, the ``cel`` extra). Expressions see one variable, ``payload`` (the
JSON the external system sent); they are checked when the callback is registered and
evaluated when it is resolved.

``celpy`` (with its own dependencies: google-re2, pendulum, lark, ...) is imported only
here, and only when an expression is checked or evaluated, so ``import awa`` and every
callback without expressions do without it (ADR 0018)."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from awa.domain.callbacks import EXPRESSION_FIELDS, CallbackExpressions
from awa.domain.errors import AwaError, ValidationError

if TYPE_CHECKING:
    import celpy

VARIABLE = "payload"

CEL_MISSING = (
    "CEL callback expressions (filter, on_complete, on_fail, transform) need the cel-python "
    "package: pip install 'awa-py[cel]'"
)


class CelUnavailable(AwaError):
    """An expression was given or stored, but cel-python is not installed."""

    def __init__(self) -> None:
        super().__init__(CEL_MISSING)


@functools.cache
def _env() -> celpy.Environment:
    try:
        import celpy
    except ImportError:
        raise CelUnavailable() from None
    return celpy.Environment()


@functools.cache
def _program(expression: str) -> Any:
    env = _env()
    return env.program(env.compile(expression))


def check(name: str, expression: str) -> None:
    """Refuse an expression that does not parse or names a variable other than
    ``payload`` (``ValidationError`` naming the field)."""
    if not isinstance(expression, str):
        raise TypeError(
            f"{name}: expected a CEL expression string, got {type(expression).__name__}"
        )
    env = _env()
    from celpy.celparser import CELParseError

    try:
        tree = env.compile(expression)
    except CELParseError as exc:
        raise ValidationError(name, f"invalid CEL expression for {name}: {exc}") from None
    names = sorted(
        {
            str(node.children[0])
            for node in tree.iter_subtrees()
            if node.data == "ident" and node.children
        }
        - {VARIABLE}
    )
    if names:
        raise ValidationError(
            name,
            f"CEL expression for {name} references undeclared variable(s): "
            f"{', '.join(names)}; only 'payload' is available",
        )


def compile_expressions(**fields: str | None) -> CallbackExpressions:
    """Check each given expression and bundle them."""
    for name in EXPRESSION_FIELDS:
        value = fields.get(name)
        if value is not None:
            check(name, value)
    return CallbackExpressions(**{name: fields.get(name) for name in EXPRESSION_FIELDS})


class EvaluationFailed(Exception):
    """The expression raised or produced an error value."""


def evaluate(expression: str, payload: Any) -> Any:
    """The expression's value over ``payload``, as plain JSON-like Python."""
    program = _program(expression)
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    try:
        result = program.evaluate({VARIABLE: json_to_cel(payload)})
    except Exception as exc:  # celpy raises its own and Python errors (e.g. division)
        raise EvaluationFailed(str(exc)) from exc
    if isinstance(result, CELEvalError):
        raise EvaluationFailed(str(result))
    return to_python(result)


def matches(expression: str, payload: Any) -> bool:
    """True only when the expression evaluates to boolean true."""
    try:
        return evaluate(expression, payload) is True
    except EvaluationFailed:
        return False


def to_python(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.BytesType):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, celtypes.MapType | dict):
        return {str(to_python(k)): to_python(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list | tuple):
        return [to_python(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value
