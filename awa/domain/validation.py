"""Input validation: refuse bad jobs before anything is written."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from awa.domain.errors import ValidationError
from awa.domain.job import JobSpec

MIN_PRIORITY = 1
MAX_PRIORITY = 4
MIN_MAX_ATTEMPTS = 1
MAX_MAX_ATTEMPTS = 1000
MAX_NAME_LENGTH = 200
MAX_TAGS = 20

#: The instants both Python (``datetime``: years 1..9999) and Postgres round-trip, in UTC.
#: Postgres stores far more (4713 BC to 294276 AD, and +-infinity), but a row outside
#: this range cannot be read back into Python. The SQL check constraints of the run_at
#: columns (migration 0395) use the same two bounds.
MIN_RUN_AT = datetime.min.replace(tzinfo=UTC)
MAX_RUN_AT = datetime.max.replace(tzinfo=UTC)

#: The longest delay a handler may ask for (``RetryAfter``, ``Snooze``): 100 years.
#: Longer ones would put ``run_at`` past :data:`MAX_RUN_AT` within this millennium.
MAX_DELAY_SECONDS = 100 * 365.25 * 86400.0


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
    if spec.run_at is not None:
        validate_run_at(spec.run_at)
    return spec


def validate_run_at(value: datetime, field: str = "run_at") -> datetime:
    """A timezone-aware instant between :data:`MIN_RUN_AT` and :data:`MAX_RUN_AT` in UTC.

    ``datetime.min`` at +05:00 is 1 BC in UTC and ``datetime.max`` at -05:00 is year
    10000: Postgres would store both, but no read could turn them back into a
    ``datetime``."""
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(
            field,
            f"must lie between {MIN_RUN_AT.isoformat()} and {MAX_RUN_AT.isoformat()} "
            f"in UTC, got {value.isoformat()}",
            value=value,
        ) from None
    return value


def validate_delay(seconds: Any, field: str = "seconds") -> float:
    """A delay in seconds: a finite number between 0 and :data:`MAX_DELAY_SECONDS`.

    Raises ``TypeError`` for a non-number and ``ValueError`` (a :class:`ValidationError`)
    for a value out of range, so a handler returning ``Snooze(3e11)`` fails with that
    message instead of a timestamp no table can hold."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{field} must be a number, got {type(seconds).__name__}")
    try:
        value = float(seconds)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise ValidationError(field, f"must be a finite number >= 0, got {seconds!r}")
    if value > MAX_DELAY_SECONDS:
        raise ValidationError(
            field,
            f"must be at most {MAX_DELAY_SECONDS:.0f} seconds (100 years), got {seconds!r}",
            value=seconds,
        )
    return value


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
