"""Enqueue on the caller's own database connection, inside the caller's transaction.

``insert_job`` accepts async connections (psycopg ``AsyncConnection``, asyncpg, SQLAlchemy
``AsyncConnection`` / ``AsyncSession``); ``insert_job_sync`` accepts sync ones (psycopg
``Connection``, SQLAlchemy ``Connection`` / ``Session``, a Django connection). Both call
the SQL producer contract ``awa.insert_job_compat`` and return the inserted row as a dict,
so the job commits or rolls back with the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from awa.domain.validation import validate_json, validate_run_at, validate_tags
from awa.entrypoints import payloads
from awa.entrypoints.args import (
    ARGS_TYPE_ERROR,
    ordering_key_bytes,
    parse_run_at,
    serialize_args,
)
from awa.runtime import tracing

RETURNED_COLUMNS = (
    "id, kind, queue, args, state::text AS state, priority, attempt, max_attempts, "
    "run_at, created_at, metadata, tags"
)

# One statement per placeholder style; the parameter order is the same for all of them.
_CALL = (
    "SELECT {cols} FROM awa.insert_job_compat("
    "CAST({p[0]} AS text), CAST({p[1]} AS text), CAST({p[2]} AS jsonb), "
    "CAST({p[3]} AS awa.job_state), CAST({p[4]} AS smallint), CAST({p[5]} AS smallint), "
    "CAST({p[6]} AS timestamptz), CAST({p[7]} AS jsonb), CAST({p[8]} AS text[]), "
    "NULL, NULL, CAST({p[9]} AS bytea))"
)
_PARAM_NAMES = (
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "max_attempts",
    "run_at",
    "metadata",
    "tags",
    "ordering_key",
)
SQL_DOLLAR = _CALL.format(cols=RETURNED_COLUMNS, p=[f"${i + 1}" for i in range(10)])
SQL_PYFORMAT = _CALL.format(cols=RETURNED_COLUMNS, p=["%s"] * 10)
SQL_NAMED = _CALL.format(cols=RETURNED_COLUMNS, p=[f":{n}" for n in _PARAM_NAMES])

NUL_MESSAGE = "Job args must not contain null bytes (\\u0000): Postgres JSONB does not support them"


@attrs.frozen
class _Values:
    kind: str
    queue: str
    args_json: str
    state: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    metadata_json: str
    tags: list[str]
    ordering_key: bytes | None

    def positional(self) -> list[Any]:
        return [
            self.kind,
            self.queue,
            self.args_json,
            self.state,
            self.priority,
            self.max_attempts,
            self.run_at,
            self.metadata_json,
            self.tags,
            self.ordering_key,
        ]

    def named(self) -> dict[str, Any]:
        return dict(zip(_PARAM_NAMES, self.positional(), strict=True))


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_contains_nul(v) for v in value)
    return False


def _prepare(
    args: Any,
    *,
    kind: str | None,
    queue: str,
    priority: int,
    max_attempts: int,
    tags: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    run_at: str | datetime | None,
    ordering_key: bytes | str | None,
) -> _Values:
    if isinstance(args, Mapping) and kind is None:
        embedded = args.get("kind")
        if not isinstance(embedded, str):
            raise TypeError("Dict args require an explicit 'kind' parameter or a 'kind' key")
        kind = embedded
    try:
        resolved_kind, payload = serialize_args(args, kind)
    except ValueError as exc:
        if str(exc).endswith(ARGS_TYPE_ERROR):
            raise TypeError(f"{ARGS_TYPE_ERROR}, got {type(args).__name__}") from None
        raise
    meta = dict(metadata or {})
    tracing.stamp(meta)
    tag_list = list(tags or [])
    if any(_contains_nul(v) for v in (payload, meta, tag_list, resolved_kind, queue)):
        raise ValueError(NUL_MESSAGE)
    if run_at is not None and not isinstance(run_at, str | datetime):
        raise TypeError(f"run_at must be a string or datetime, got {type(run_at).__name__}")
    # The SQL function checks names and numbers; what it cannot see (text the driver
    # cannot encode, NaN, non-string keys, an instant Python cannot read back) is refused
    # here, before anything reaches the caller's transaction.
    validate_tags(tags if isinstance(tags, str | bytes) else tag_list)
    validate_json("args", payload)
    validate_json("metadata", meta)
    when = parse_run_at(run_at)
    if when is not None:
        validate_run_at(when)
    if ordering_key is not None and not isinstance(ordering_key, str | bytes):
        raise TypeError(f"ordering_key must be bytes or str, got {type(ordering_key).__name__}")
    return _Values(
        kind=resolved_kind,
        queue=queue,
        args_json=payloads.dumps(payload),
        state="available" if run_at is None else "scheduled",
        priority=priority,
        max_attempts=max_attempts,
        run_at=when,
        metadata_json=payloads.dumps(meta),
        tags=tag_list,
        ordering_key=ordering_key_bytes(ordering_key),
    )


def _driver(conn: Any) -> str:
    """``asyncpg``, ``psycopg``, ``sqlalchemy`` or ``django`` plus ``_async`` / ``_sync``."""
    cls = type(conn)
    module = cls.__module__ or ""
    is_async = "Async" in cls.__name__
    if module.startswith("asyncpg"):
        return "asyncpg_async"
    if module.startswith("psycopg"):
        return "psycopg_async" if is_async else "psycopg_sync"
    if module.startswith("sqlalchemy"):
        return "sqlalchemy_async" if is_async else "sqlalchemy_sync"
    if module.startswith("django") or getattr(conn, "vendor", None) == "postgresql":
        return "django_sync"
    raise TypeError(
        f"Unsupported connection type: {cls.__qualname__} (module={module}). "
        "Supported drivers: asyncpg, psycopg3, SQLAlchemy, and Django."
    )


def _cursor_row(description: Any, row: Any) -> dict[str, Any]:
    if isinstance(row, Mapping):
        return dict(row)
    names = [getattr(col, "name", None) or col[0] for col in description]
    return dict(zip(names, row, strict=True))


def _decode_json(row: dict[str, Any]) -> dict[str, Any]:
    for key in ("args", "metadata"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    return row


def _sqlalchemy_statement() -> Any:
    from sqlalchemy import text

    return text(SQL_NAMED)


async def insert_job(
    conn: Any,
    args: Any,
    *,
    kind: str | None = None,
    queue: str = "default",
    priority: int = 2,
    max_attempts: int = 25,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    run_at: str | datetime | None = None,
    ordering_key: bytes | str | None = None,
) -> dict[str, Any]:
    """Insert a job on an async connection, inside its current transaction.

    Returns ``id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
    created_at, metadata, tags``. A sync connection raises ``TypeError``.
    """
    values = _prepare(
        args,
        kind=kind,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
        run_at=run_at,
        ordering_key=ordering_key,
    )
    driver = _driver(conn)
    if driver == "asyncpg_async":
        record = await conn.fetchrow(SQL_DOLLAR, *values.positional())
        return _decode_json(dict(record))
    if driver == "psycopg_async":
        cursor = conn.cursor()
        try:
            await cursor.execute(SQL_PYFORMAT, values.positional())
            row = await cursor.fetchone()
            return _decode_json(_cursor_row(cursor.description, row))
        finally:
            await cursor.close()
    if driver == "sqlalchemy_async":
        result = await conn.execute(_sqlalchemy_statement(), values.named())
        return _decode_json(dict(result.mappings().one()))
    raise TypeError(
        "insert_job() requires an async connection; use insert_job_sync() for sync "
        f"psycopg, SQLAlchemy or Django connections. Got: {type(conn).__qualname__}"
    )


def insert_job_sync(
    conn: Any,
    args: Any,
    *,
    kind: str | None = None,
    queue: str = "default",
    priority: int = 2,
    max_attempts: int = 25,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    run_at: str | datetime | None = None,
    ordering_key: bytes | str | None = None,
) -> dict[str, Any]:
    """Insert a job on a sync connection (psycopg, SQLAlchemy, Django), inside its
    current transaction. An async connection raises ``TypeError``."""
    values = _prepare(
        args,
        kind=kind,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
        run_at=run_at,
        ordering_key=ordering_key,
    )
    driver = _driver(conn)
    if driver in ("psycopg_sync", "django_sync"):
        with conn.cursor() as cursor:
            cursor.execute(SQL_PYFORMAT, values.positional())
            row = cursor.fetchone()
            return _decode_json(_cursor_row(cursor.description, row))
    if driver == "sqlalchemy_sync":
        result = conn.execute(_sqlalchemy_statement(), values.named())
        return _decode_json(dict(result.mappings().one()))
    raise TypeError(
        "insert_job_sync() requires a sync connection; use insert_job() for asyncpg, "
        f"psycopg async or SQLAlchemy async connections. Got: {type(conn).__qualname__}"
    )
