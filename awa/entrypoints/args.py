"""Turning user-supplied job arguments and insert options into validated ``JobSpec`` values.

Args may be a dataclass instance, a pydantic model (dumped with ``model_dump(mode="json")``)
or a plain dict (which then needs ``kind=``, else the kind is derived from ``dict``).
Handlers receive args rebuilt into the registered type.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Unpack

import attrs
import blake3

from awa.domain import dependencies
from awa.domain.errors import ValidationError
from awa.domain.flow_control import validate_job_key, with_concurrency_key
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, JobSpec
from awa.domain.kinds import derive_kind
from awa.domain.unique import UniqueOpts, derive_unique_key
from awa.domain.unique_conflict import SKIP, with_conflict_mode
from awa.domain.validation import (
    is_storable_text,
    validate_json,
    validate_kind,
    validate_max_attempts,
    validate_priority,
    validate_queue,
    validate_run_at,
    validate_tags,
    validate_unique_states,
)
from awa.entrypoints import payloads
from awa.entrypoints.insert_options import InsertOptions
from awa.runtime import tracing

# The 0.6.9 wording, which callers match, with attrs classes (accepted since) added.
ARGS_TYPE_ERROR = "Job args must be a dataclass, pydantic BaseModel, or dict (or an attrs class)"


def _is_pydantic(value: Any) -> bool:
    return hasattr(value, "model_dump") and hasattr(type(value), "model_validate")


@functools.cache
def _field_names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def to_json_value(value: Any, field: str = "args") -> Any:
    """JSON-shaped data for a payload value (see :mod:`awa.entrypoints.payloads`)."""
    return payloads.to_json_value(value, field=field)


def serialize_args(args: Any, kind: str | None) -> tuple[str, Any]:
    """Return ``(kind, json_args)`` for a dataclass, pydantic model or dict."""
    if isinstance(args, type):
        raise ValidationError("args", ARGS_TYPE_ERROR)
    if dataclasses.is_dataclass(args) or attrs.has(type(args)):
        payload: Any = to_json_value(args)
    elif _is_pydantic(args):
        payload = args.model_dump(mode="json")
    elif isinstance(args, Mapping):
        payload = to_json_value(args)
    else:
        raise ValidationError("args", ARGS_TYPE_ERROR)
    resolved = kind if kind is not None else _derived_kind(type(args).__name__)
    return resolved, payload


@functools.lru_cache(maxsize=1024)
def _is_dataclass_type(cls: type[Any]) -> bool:
    return dataclasses.is_dataclass(cls)


def _flat_value(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar that passes :func:`validate_json` as it is:
    exactly ``None``, ``bool``, ``int``, a finite ``float`` or a ``str`` without NUL."""
    kind = type(value)
    if kind is str:
        return is_storable_text(value)
    if kind is float:
        return bool(value - value == 0.0)  # false for inf and nan
    return kind is int or kind is bool or value is None


def _serialize_plain(args: Any, kind: str | None) -> tuple[str, dict[str, Any]] | None:
    """``(kind, json_args)`` in one pass for the common shape (a dataclass, or a dict with
    string keys, whose values are plain JSON scalars that ``validate_json`` accepts), so
    the payload needs no separate conversion or check; ``None`` for any other shape or
    value, which then takes :func:`serialize_args` and ``validate_json`` with their own
    errors."""
    cls: Any = type(args)
    payload: dict[str, Any] = {}
    if cls is dict:
        for key, value in args.items():
            if type(key) is not str or not is_storable_text(key) or not _flat_value(value):
                return None
            payload[key] = value
    elif not isinstance(args, type) and _is_dataclass_type(cls):
        for name in _field_names(cls):
            value = getattr(args, name)
            if not _flat_value(value):
                return None
            payload[name] = value
    else:
        return None
    return (kind if kind is not None else _derived_kind(cls.__name__)), payload


@functools.lru_cache(maxsize=1024)
def _derived_kind(name: str) -> str:
    # A bulk insert derives the same kind for every job of the batch.
    return derive_kind(name)


def kind_for_type(args_type: type[Any], kind: str | None) -> str:
    """The kind a handler registered for ``args_type`` serves."""
    return kind if kind is not None else derive_kind(args_type.__name__)


def rebuild_args(args_type: type[Any] | None, data: Any) -> Any:
    """Rebuild stored JSON args as ``args_type`` (a dataclass, attrs class or pydantic
    model, nested values included) through :mod:`awa.entrypoints.payloads`; dict args or
    another type keep the raw value. A missing or unknown field raises
    ``ValidationError`` naming it."""
    if args_type is None or not isinstance(data, dict):
        return data
    if payloads.is_structured_type(args_type):
        return payloads.from_json_value(args_type, data)
    return data


_NAIVE_FORMATS = (
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S.%f",
)
_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_run_at(value: Any) -> datetime | None:
    """``run_at``: a datetime (naive means UTC) or an RFC 3339 /
    ``YYYY-MM-DD[T ]HH:MM:SS[.f]`` string (no offset means UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value
    if isinstance(value, str):
        text = _FRACTION.sub(r"\1", value.strip())
        parsed: datetime | None = None
        if re.fullmatch(
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?", text
        ):
            try:
                parsed = datetime.fromisoformat(text.replace("z", "Z"))
            except ValueError:
                parsed = None
        if parsed is None:
            for fmt in _NAIVE_FORMATS:
                try:
                    parsed = datetime.strptime(text, fmt)
                    break
                except ValueError:
                    continue
        if parsed is None:
            raise ValidationError("run_at", f"invalid datetime string: {value!r}", value=value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
    raise ValidationError(
        "run_at", f"must be a datetime or string, got {type(value).__name__}", value=value
    )


def ordering_key_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ValidationError("ordering_key", f"must be bytes or str, got {type(value).__name__}")


def blake3_digest(material: bytes) -> bytes:
    return bytes(blake3.blake3(material).digest())


def unique_key_for(
    kind: str, *, queue: str | None, args: Any | None, period_bucket: int | None
) -> bytes:
    """The BLAKE3 unique key of ``(kind, queue?, args?, period_bucket?)``."""
    return derive_unique_key(
        blake3_digest, kind, queue=queue, args=args, period_bucket=period_bucket
    )


def with_parents(spec: JobSpec, depends_on: Any) -> JobSpec:
    """``spec`` waiting on the jobs ``depends_on`` names (ids, job handles or
    ``awa.Dependency`` entries with a failure policy; ADR 0032)."""
    parents, policies = dependencies.parents_of(depends_on)
    if not parents:
        return spec
    planned = attrs.evolve(spec, depends_on=parents, on_parent_failure=policies)
    dependencies.check_spec(planned)
    return planned


def build_spec(args: Any, **options: Unpack[InsertOptions]) -> JobSpec:
    """Validate every insert option and build the ``JobSpec``; errors name the field.

    Each check runs once, in the order ``validate_spec`` would report them after the
    option checks: the spec it returns is valid as it stands."""
    kind = options.get("kind")
    queue = options.get("queue", DEFAULT_QUEUE)
    priority = options.get("priority", DEFAULT_PRIORITY)
    max_attempts = options.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    tags = options.get("tags")
    metadata = options.get("metadata")
    unique_opts = options.get("unique_opts")
    plain = _serialize_plain(args, kind)
    resolved_kind, payload = serialize_args(args, kind) if plain is None else plain
    validate_kind(resolved_kind)
    validate_queue(queue)
    validate_priority(priority)
    validate_max_attempts(max_attempts)
    tag_tuple = validate_tags(tags or ())
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValidationError("metadata", "must be a dict")
    meta = to_json_value(dict(metadata or {}), "metadata")
    tracing.stamp(meta)
    meta = with_concurrency_key(meta, options.get("concurrency_key"))
    when = parse_run_at(options.get("run_at"))
    if when is not None:
        validate_run_at(when)
    unique_key: bytes | None = None
    unique_states: int | None = None
    conflict = SKIP
    if unique_opts is not None:
        if not isinstance(unique_opts, Mapping):
            raise ValidationError("unique_opts", "must be a dict")
        opts = UniqueOpts.from_dict(dict(unique_opts))
        unique_key = unique_key_for(
            resolved_kind,
            queue=queue if opts.by_queue else None,
            args=payload if opts.by_args else None,
            period_bucket=opts.by_period,
        )
        unique_states = opts.states
        conflict = opts.on_conflict
    # The conflict mode rides in the metadata (ADR 0034); without unique_opts a stray
    # 'awa:unique_conflict' entry is dropped, as it could only mislead.
    meta = with_conflict_mode(meta, conflict)
    spec = JobSpec(
        kind=resolved_kind,
        args=payload,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        run_at=when,
        metadata=meta,
        tags=tag_tuple,
        unique_key=unique_key,
        unique_states=unique_states,
        ordering_key=ordering_key_bytes(options.get("ordering_key")),
    )
    validate_job_key(spec.metadata, spec.ordering_key)
    # The rest of validate_spec: the names, numbers and tags were checked above, the keys
    # are bytes and run_at is timezone-aware by construction.
    if plain is None:
        validate_json("args", payload)
    validate_json("metadata", meta)
    if unique_states is not None:
        validate_unique_states(unique_states)
    return spec


def _overridden(common: InsertOptions, override: Mapping[str, Any]) -> InsertOptions:
    """The batch's options with one job's ``queue`` / ``ordering_key`` /
    ``concurrency_key`` in their place."""
    options = InsertOptions(**common)
    if "queue" in override:
        options["queue"] = override["queue"]
    if "ordering_key" in override:
        options["ordering_key"] = override["ordering_key"]
    if "concurrency_key" in override:
        options["concurrency_key"] = override["concurrency_key"]
    return options


def build_specs(
    jobs: Sequence[Any],
    *,
    opts: Sequence[Mapping[str, Any] | None] | None = None,
    **common: Unpack[InsertOptions],
) -> list[JobSpec]:
    """Specs for a bulk insert; ``opts[i]`` may override ``queue`` / ``ordering_key`` /
    ``concurrency_key``."""
    if opts is not None and len(opts) != len(jobs):
        raise ValidationError("opts", f"must have one entry per job ({len(jobs)}), got {len(opts)}")
    specs: list[JobSpec] = []
    # The options shared by the batch are validated once, with the first job that uses
    # them; later jobs only bring their args (and the kind they derive).
    template: JobSpec | None = None
    shared = common.get("unique_opts") is None
    kind_option = common.get("kind")
    for index, job in enumerate(jobs):
        override = opts[index] if opts is not None else None
        if override:
            unknown = set(override) - {"queue", "ordering_key", "concurrency_key"}
            if unknown:
                raise ValidationError("opts", f"unknown keys: {sorted(unknown)}")
            specs.append(build_spec(job, **_overridden(common, override)))
        elif template is None or not shared:
            template = build_spec(job, **common)
            specs.append(template)
        else:
            plain = _serialize_plain(job, kind_option)
            kind, payload = serialize_args(job, kind_option) if plain is None else plain
            if kind != template.kind:
                validate_kind(kind)
            if plain is None:
                validate_json("args", payload)
            specs.append(
                JobSpec(
                    kind=kind,
                    args=payload,
                    queue=template.queue,
                    priority=template.priority,
                    max_attempts=template.max_attempts,
                    run_at=template.run_at,
                    metadata=template.metadata,
                    tags=template.tags,
                    unique_key=template.unique_key,
                    unique_states=template.unique_states,
                    ordering_key=template.ordering_key,
                )
            )
    return specs
