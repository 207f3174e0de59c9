"""Input validation: refuse bad jobs before anything is written."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from awa.domain.errors import ValidationError
from awa.domain.job import JobSpec

MIN_PRIORITY = 1
MAX_PRIORITY = 4
MIN_MAX_ATTEMPTS = 1
MAX_MAX_ATTEMPTS = 1000
MAX_NAME_LENGTH = 200
MAX_TAGS = 20


def validate_priority(priority: Any, field: str = "priority") -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError(field, f"must be an integer, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValidationError(
            field,
            f"must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}",
            value=priority,
        )
    return priority


def validate_max_attempts(max_attempts: Any) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValidationError(
            "max_attempts", f"must be an integer, got {type(max_attempts).__name__}"
        )
    if not MIN_MAX_ATTEMPTS <= max_attempts <= MAX_MAX_ATTEMPTS:
        raise ValidationError(
            "max_attempts",
            f"must be between {MIN_MAX_ATTEMPTS} and {MAX_MAX_ATTEMPTS}, got {max_attempts}",
            value=max_attempts,
        )
    return max_attempts


def validate_name(field: str, value: Any) -> str:
    """Kind and queue names: non-empty text of at most 200 characters without NUL."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(
            field, f"must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
        )
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL bytes")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValidationError(
                field, "must be valid Unicode text (it holds a lone surrogate)"
            ) from None
    return value


def validate_tags(tags: Iterable[Any]) -> tuple[str, ...]:
    result = tuple(tags)
    if len(result) > MAX_TAGS:
        raise ValidationError("tags", f"at most {MAX_TAGS} tags are allowed, got {len(result)}")
    for tag in result:
        if not isinstance(tag, str):
            raise ValidationError("tags", f"every tag must be a string, got {type(tag).__name__}")
        if "\x00" in tag:
            raise ValidationError("tags", "must not contain NUL bytes")
        if len(tag) > MAX_NAME_LENGTH:
            raise ValidationError("tags", f"a tag must be at most {MAX_NAME_LENGTH} characters")
    return result


def validate_json(field: str, value: Any) -> Any:
    """JSON-serialisable, finite numbers only, string-keyed objects, no NUL anywhere."""
    _check_json(field, value, depth=0)
    return value


def _check_json(field: str, value: Any, depth: int) -> None:
    if depth > 100:
        raise ValidationError(field, "is nested too deeply (more than 100 levels)")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(field, f"contains a non-finite number ({value})")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError(field, "must not contain NUL bytes")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(field, item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(field, f"object keys must be strings, got {key!r}")
            if "\x00" in key:
                raise ValidationError(field, "must not contain NUL bytes")
            _check_json(field, item, depth + 1)
        return
    raise ValidationError(field, f"is not JSON-serialisable ({type(value).__name__})")


def validate_unique_states(mask: Any) -> int:
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask <= 0xFF:
        raise ValidationError("unique_opts.states", "must be an 8-bit integer mask (0..255)")
    return mask


def validate_spec(spec: JobSpec) -> JobSpec:
    """Check every field of a spec; raise ``ValidationError`` naming the first bad one."""
    validate_name("kind", spec.kind)
    validate_name("queue", spec.queue)
    validate_priority(spec.priority)
    validate_max_attempts(spec.max_attempts)
    validate_json("args", spec.args)
    if not isinstance(spec.metadata, dict):
        raise ValidationError("metadata", "must be a JSON object")
    validate_json("metadata", spec.metadata)
    validate_tags(spec.tags)
    if spec.unique_states is not None:
        validate_unique_states(spec.unique_states)
    if spec.unique_key is not None and not isinstance(spec.unique_key, bytes):
        raise ValidationError("unique_key", "must be bytes")
    if spec.ordering_key is not None and not isinstance(spec.ordering_key, bytes):
        raise ValidationError("ordering_key", "must be bytes")
    if spec.run_at is not None and spec.run_at.tzinfo is None:
        raise ValidationError("run_at", "must be timezone-aware")
    return spec


def json_dumps(field: str, value: Any) -> str:
    """Serialise validated JSON compactly; failures become :class:`ValidationError`."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"is not JSON-serialisable: {exc}") from exc


#: The queue-storage schema the migrations own; its ring sizes are fixed.
DEFAULT_QUEUE_STORAGE_SCHEMA = "awa"
DEFAULT_SLOT_COUNTS = {"queue_slot_count": 16, "lease_slot_count": 8, "claim_slot_count": 8}


def validate_slot_counts(schema: str | None, counts: dict[str, int], *, prefix: str = "") -> None:
    """Ring sizes other than the defaults need their own schema: the default schema
    ``awa`` is built by the migrations with 16 queue, 8 lease and 8 claim slots."""
    if schema not in (None, DEFAULT_QUEUE_STORAGE_SCHEMA):
        return
    for name, value in counts.items():
        default = DEFAULT_SLOT_COUNTS[name]
        if value != default:
            raise ValidationError(
                prefix + name,
                f"the default schema 'awa' keeps {default}; install queue storage into "
                f"another schema to use {value}",
                value=value,
            )
