"""External callbacks: the resolution actions, timeouts and CEL resolution expressions.

What each action does to the waiting job is decided in :mod:`awa.domain.lifecycle`.
Engines look the attempt up by callback id under their own locking and apply that
transition; every action ends the callback (its id stops resolving), so a second resolve,
a late heartbeat or a token from an attempt that was rescued or retried meanwhile raises
:class:`CallbackNotFound`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import attrs

from awa.domain.errors import CallbackNotFound, ValidationError


class CallbackAction(enum.StrEnum):
    """An action of ``resolve_callback`` of the storage port; what it does to the waiting
    attempt is decided by :func:`awa.domain.lifecycle.callback_resolution`."""

    COMPLETE = "complete"
    FAIL = "fail"
    RETRY = "retry"
    RESUME = "resume"


#: What ``resolve_callback`` of the storage port accepts.
CALLBACK_ACTIONS = frozenset(action.value for action in CallbackAction)


def check_action(action: str) -> CallbackAction:
    """``action`` as a :class:`CallbackAction`, or :class:`ValidationError` naming the
    accepted ones."""
    try:
        return CallbackAction(action)
    except ValueError:
        raise ValidationError(
            "action", f"must be one of {sorted(CALLBACK_ACTIONS)}", value=action
        ) from None


def callback_not_found(callback_id: str) -> CallbackNotFound:
    return CallbackNotFound(f"callback not found: {callback_id}")


def validate_timeout(value: Any, operation: str) -> float:
    """A callback timeout in seconds (``timeout_seconds`` of ``operation``): a finite
    number, not negative."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float):
        raise TypeError(f"timeout_seconds: must be real number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValidationError(
            operation,
            f"timeout_seconds must be a finite, non-negative number, got {value!r}",
            value=value,
        )
    return float(value)


# ------------------------------------------------------------------ resolution expressions

EXPRESSION_FIELDS = ("filter", "on_complete", "on_fail", "transform")


@attrs.frozen
class CallbackExpressions:
    """The CEL expressions a callback was registered with (variable ``payload`` only)."""

    filter: str | None = None
    on_complete: str | None = None
    on_fail: str | None = None
    transform: str | None = None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in EXPRESSION_FIELDS)


@attrs.frozen
class Resolution:
    """What ``resolve_callback`` does: ``complete`` (with ``payload``), ``fail`` (with
    ``error`` and the matching ``expression``) or ``ignore`` (with ``reason``)."""

    outcome: str
    payload: Any = None
    error: str | None = None
    expression: str | None = None
    reason: str | None = None


RESOLVE_DEFAULTS = ("complete", "fail", "ignore")
FILTER_REJECTED = "filter expression returned false"
NOTHING_MATCHED = "no expressions configured, default is ignore"
ON_FAIL_MATCHED = "callback failed: on_fail expression matched"
DEFAULT_FAILED = "callback failed: default action"


def check_default_action(value: str) -> None:
    if value not in RESOLVE_DEFAULTS:
        raise ValueError(
            f"unknown default_action: {value} (expected 'complete', 'fail', or 'ignore')"
        )


def decide_resolution(
    expressions: CallbackExpressions,
    payload: Any,
    *,
    matched: Callable[[str], bool],
    transformed: Callable[[str], Any],
    default_action: str,
) -> Resolution:
    """Apply the expressions in awa-pg's order: a ``filter`` that is not true ignores the
    payload; then ``on_fail``, then ``on_complete`` (its payload passed through
    ``transform``); otherwise ``default_action``. ``matched(expr)`` is true only for an
    expression that evaluates to boolean true (errors and non-booleans do not match);
    ``transformed(expr)`` returns the new payload (the caller falls back to the payload
    itself when it cannot be evaluated)."""
    check_default_action(default_action)
    if expressions.filter is not None and not matched(expressions.filter):
        return Resolution("ignore", reason=FILTER_REJECTED)
    if expressions.on_fail is not None and matched(expressions.on_fail):
        return Resolution("fail", error=ON_FAIL_MATCHED, expression=expressions.on_fail)
    if expressions.on_complete is not None and matched(expressions.on_complete):
        result = payload
        if expressions.transform is not None:
            result = transformed(expressions.transform)
        return Resolution("complete", payload=result)
    if default_action == "complete":
        return Resolution("complete", payload=payload)
    if default_action == "fail":
        return Resolution("fail", error=DEFAULT_FAILED)
    return Resolution("ignore", reason=NOTHING_MATCHED)
