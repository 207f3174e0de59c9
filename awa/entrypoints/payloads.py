"""Job payloads in and out of JSON through one cattrs converter, and the one JSON encoder.

Arguments round-trip: what a producer enqueues (a dataclass, an attrs class, a pydantic
model or a dict) is stored as JSON, and the handler receives it rebuilt as the type it
registered, nested values included: dataclasses and attrs classes inside each other,
pydantic models, ``datetime`` / ``date`` / ``time`` (ISO 8601), ``UUID`` and ``Decimal``
(strings), ``bytes`` (hex), enums (their values), ``Optional``, lists, tuples, sets and
dicts of any of them.

Rebuilding is strict: a missing field or one the type does not declare raises
:class:`~awa.ValidationError` naming the field by its path (``args.addr.zip``), as does a
value of the wrong type.

:func:`to_json_value` is the only JSON encoder: job arguments and metadata use it
strictly (an unsupported value is an error), output (``dump_job``, the CLI's ``--json``)
leniently (an unsupported value becomes its ``str``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from collections.abc import Mapping
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from awa.domain.errors import ValidationError
from awa.domain.validation import MAX_JSON_DEPTH


def _is_pydantic_type(cls: Any) -> bool:
    return isinstance(cls, type) and hasattr(cls, "model_validate") and hasattr(cls, "model_dump")


def _structure_datetime(value: Any, _: type[Any]) -> datetime:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO-8601 datetime string, got {type(value).__name__}")
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    return datetime.fromisoformat(text)


def _structure_date(value: Any, _: type[Any]) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO-8601 date string, got {type(value).__name__}")
    return date.fromisoformat(value)


def _structure_time(value: Any, _: type[Any]) -> time:
    if isinstance(value, time):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO-8601 time string, got {type(value).__name__}")
    return time.fromisoformat(value)


def _structure_decimal(value: Any, _: type[Any]) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise TypeError(f"expected a decimal string or number, got {type(value).__name__}")
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal number") from None


def _structure_bytes(value: Any, _: type[Any]) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected a hex string, got {type(value).__name__}")
    return bytes.fromhex(value)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    for cls in (datetime, date, time):
        conv.register_unstructure_hook(cls, lambda v: v.isoformat())
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_structure_hook(date, _structure_date)
    conv.register_structure_hook(time, _structure_time)
    conv.register_unstructure_hook(uuid.UUID, str)
    conv.register_structure_hook(
        uuid.UUID, lambda v, _: v if isinstance(v, uuid.UUID) else uuid.UUID(v)
    )
    conv.register_unstructure_hook(Decimal, str)
    conv.register_structure_hook(Decimal, _structure_decimal)
    conv.register_unstructure_hook(bytes, bytes.hex)
    conv.register_structure_hook(bytes, _structure_bytes)
    conv.register_unstructure_hook_func(_is_pydantic_type, lambda v: v.model_dump(mode="json"))
    conv.register_structure_hook_func(
        _is_pydantic_type, lambda v, cls: v if isinstance(v, cls) else cls.model_validate(v)
    )
    return conv


converter = _make_converter()
"""The converter every payload goes through (hooks may be added for custom types)."""


def to_json_value(value: Any, *, strict: bool = True, field: str = "args", _depth: int = 0) -> Any:
    """``value`` as JSON-shaped data (dicts with string keys, lists, scalars).

    ``strict`` raises :class:`~awa.ValidationError` naming ``field`` for a value with no
    JSON form, and for an object key that is not a string (``{1: "a"}`` would not read
    back equal); otherwise such a value becomes ``str(value)``. Nesting stops at
    ``MAX_JSON_DEPTH`` either way, so a value that contains itself is refused rather than
    recursed into."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if _depth > MAX_JSON_DEPTH:
        raise ValidationError(
            field,
            f"is nested too deeply (more than {MAX_JSON_DEPTH} levels, or it contains itself)",
        )
    depth = _depth + 1
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                if strict:
                    raise ValidationError(
                        field, f"object keys must be strings, got {type(key).__name__} {key!r}"
                    )
                key = str(key)
            result[key] = to_json_value(item, strict=strict, field=field, _depth=depth)
        return result
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json_value(v, strict=strict, field=field, _depth=depth) for v in value]
    if isinstance(value, enum.Enum):
        return to_json_value(value.value, strict=strict, field=field, _depth=depth)
    cls = type(value)
    if (
        dataclasses.is_dataclass(cls)
        or attrs.has(cls)
        or _is_pydantic_type(cls)
        or isinstance(value, datetime | date | time | uuid.UUID | Decimal | bytes)
    ):
        return to_json_value(converter.unstructure(value), strict=strict, field=field, _depth=depth)
    if strict:
        raise ValidationError(field, f"is not JSON-serialisable ({cls.__name__})")
    return str(value)


def dumps(value: Any, **kwargs: Any) -> str:
    """JSON text of ``value`` for output (lenient :func:`to_json_value`)."""
    return json.dumps(to_json_value(value, strict=False), **kwargs)


def is_structured_type(cls: Any) -> bool:
    """Whether job args of type ``cls`` are rebuilt by the converter."""
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls) or attrs.has(cls) or _is_pydantic_type(cls)
    )


def from_json_value(args_type: type[Any], data: Any) -> Any:
    """Rebuild stored JSON ``data`` as ``args_type``; :class:`~awa.ValidationError`
    naming each offending field otherwise."""
    try:
        return converter.structure(data, args_type)
    except Exception as exc:
        raise ValidationError("args", _describe(exc, args_type)) from None


def _describe(exc: BaseException, args_type: type[Any]) -> str:
    problems = [_problem(e, path) for e, path in _leaves(exc, "args")]
    return f"cannot be rebuilt as {args_type.__name__}: " + "; ".join(problems)


def _leaves(exc: BaseException, path: str) -> list[tuple[BaseException, str]]:
    if isinstance(exc, ForbiddenExtraKeysError):
        return [(exc, path)]
    if isinstance(exc, ClassValidationError | IterableValidationError):
        found: list[tuple[BaseException, str]] = []
        for sub in exc.exceptions:
            note = _note(sub)
            found.extend(_leaves(sub, f"{path}{note}"))
        return found
    if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors"):
        # A pydantic model's own validation: one entry per field.
        return [
            (ValueError(str(e.get("msg"))), path + "".join(f".{p}" for p in e.get("loc", ())))
            for e in exc.errors()
        ]
    return [(exc, path)]


def _note(exc: BaseException) -> str:
    for note in getattr(exc, "__notes__", ()):
        name = getattr(note, "name", None)
        if name is not None:
            return f".{name}"
        index = getattr(note, "index", None)
        if index is not None:
            return f"[{index}]"
    return ""


def _problem(exc: BaseException, path: str) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"{path}: unknown field(s) {', '.join(sorted(exc.extra_fields))}"
    if isinstance(exc, KeyError):
        return f"{path}: required field missing"
    return f"{path}: {exc}"
