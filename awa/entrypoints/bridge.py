"""Enqueue on the caller's own database connection, inside the caller's transaction.

``insert_job`` accepts async connections (psycopg ``AsyncConnection``, asyncpg, SQLAlchemy
``AsyncConnection`` / ``AsyncSession``); ``insert_job_sync`` accepts sync ones (psycopg
``Connection``, SQLAlchemy ``Connection`` / ``Session``, a Django connection). Both call
the SQL producer contract ``awa.insert_job_compat`` and return the inserted row as a dict,
so the job commits or rolls back with the caller's transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Unpack

from awa.adapters._pg import insert_compat
from awa.domain.errors import ValidationError
from awa.domain.flow_control import validate_job_key, with_concurrency_key
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, initial_state
from awa.domain.keywords import check_keywords
from awa.domain.states import mask_to_bitstring
from awa.domain.unique import UniqueOpts
from awa.domain.unique_conflict import (
    SKIP,
    ConflictMode,
    insert_outcome,
    with_conflict_mode,
)
from awa.domain.validation import (
    validate_json,
    validate_kind,
    validate_queue,
    validate_run_at,
    validate_tags,
)
from awa.entrypoints import payloads
from awa.entrypoints.args import (
    ARGS_TYPE_ERROR,
    ordering_key_bytes,
    parse_run_at,
    serialize_args,
    unique_key_for,
)
from awa.entrypoints.insert_options import BridgeOptions
from awa.runtime import metrics, tracing

log = logging.getLogger("awa.bridge")

NUL_MESSAGE = "Job args must not contain null bytes (\\u0000): Postgres JSONB does not support them"


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_contains_nul(v) for v in value)
    return False


def _prepare(function: str, args: Any, options: BridgeOptions) -> dict[str, Any]:
    """The statement's parameters for this job, validated; what the SQL function cannot
    check is refused here."""
    check_keywords(function, options, BridgeOptions)
    kind = options.get("kind")
    queue = options.get("queue", DEFAULT_QUEUE)
    tags = options.get("tags")
    run_at = options.get("run_at")
    ordering_key = options.get("ordering_key")
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
    meta = dict(options.get("metadata") or {})
    tracing.stamp(meta)
    meta = with_concurrency_key(meta, options.get("concurrency_key"))
    unique_key, unique_states, conflict = _unique(resolved_kind, queue, payload, options)
    meta = with_conflict_mode(meta, conflict)
    tag_list = list(tags or [])
    if any(_contains_nul(v) for v in (payload, meta, tag_list, resolved_kind, queue)):
        raise ValueError(NUL_MESSAGE)
    if run_at is not None and not isinstance(run_at, str | datetime):
        raise TypeError(f"run_at must be a string or datetime, got {type(run_at).__name__}")
    # The SQL function checks names and numbers; what it cannot see (text the driver
    # cannot encode, NaN, non-string keys, an instant Python cannot read back) is refused
    # here, before anything reaches the caller's transaction.
    validate_kind(resolved_kind)
    validate_queue(queue)
    validate_tags(tags if isinstance(tags, str | bytes) else tag_list)
    validate_json("args", payload)
    validate_json("metadata", meta)
    when = parse_run_at(run_at)
    if when is not None:
        validate_run_at(when)
    if ordering_key is not None and not isinstance(ordering_key, str | bytes):
        raise TypeError(f"ordering_key must be bytes or str, got {type(ordering_key).__name__}")
    validate_job_key(meta, ordering_key_bytes(ordering_key))
    return {
        "kind": resolved_kind,
        "queue": queue,
        "args": payloads.dumps(payload),
        "state": initial_state(when).sql_name,
        "priority": options.get("priority", DEFAULT_PRIORITY),
        "max_attempts": options.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
        "run_at": when,
        "metadata": payloads.dumps(meta),
        "tags": tag_list,
        "unique_key": unique_key,
        "unique_states": None if unique_states is None else mask_to_bitstring(unique_states),
        "ordering_key": ordering_key_bytes(ordering_key),
    }


def _unique(
    kind: str, queue: str, payload: Any, options: BridgeOptions
) -> tuple[bytes | None, int | None, ConflictMode]:
    """The unique key, state mask and conflict mode ``unique_opts`` asks for."""
    unique_opts = options.get("unique_opts")
    if unique_opts is None:
        return None, None, SKIP
    if not isinstance(unique_opts, Mapping):
        raise ValidationError("unique_opts", "must be a dict")
    opts = UniqueOpts.from_dict(dict(unique_opts))
    key = unique_key_for(
        kind,
        queue=queue if opts.by_queue else None,
        args=payload if opts.by_args else None,
        period_bucket=opts.by_period,
    )
    return key, opts.states, opts.on_conflict


def _merges(options: BridgeOptions) -> bool:
    unique_opts = options.get("unique_opts")
    return isinstance(unique_opts, Mapping) and unique_opts.get("on_conflict") not in (
        None,
        "skip",
    )


def _with_outcome(row: dict[str, Any], options: BridgeOptions) -> dict[str, Any]:
    """An insert with a replace / debounce mode says what it did (``insert_outcome``:
    ``"inserted"``, ``"replaced"`` or ``"debounced"``, ADR 0034)."""
    if not _merges(options):
        return row
    meta = row.get("metadata")
    if isinstance(meta, str | bytes):
        meta = json.loads(meta)
    if isinstance(meta, Mapping):
        row["insert_outcome"] = str(insert_outcome(meta))
    return row


def _counted(conn: Any, driver: str, row: dict[str, Any]) -> dict[str, Any]:
    """Count the job in ``awa.job.inserted`` when the caller's transaction commits, as
    the client counts its own transactions. Where the driver cannot report the commit
    (psycopg or asyncpg inside an open transaction) the job is not counted; the queue
    depth gauges still see it."""
    instruments = metrics.instruments()
    if instruments is not None:
        pair = (str(row["queue"]), str(row["kind"]))
        try:
            insert_compat.when_committed(conn, driver, lambda: instruments.inserted([pair]))
        except Exception:
            # Counting must never turn a stored insert into an error for the caller.
            log.debug("awa.job.inserted: could not follow the commit", exc_info=True)
    return row


async def insert_job(conn: Any, args: Any, **options: Unpack[BridgeOptions]) -> dict[str, Any]:
    """Insert a job on an async connection, inside its current transaction.

    Returns ``id, kind, queue, args, state, priority, attempt, max_attempts, run_at,
    created_at, metadata, tags``, and ``insert_outcome`` when ``unique_opts`` has a
    ``replace`` / ``debounce`` ``on_conflict``. A sync connection raises ``TypeError``.
    """
    values = _prepare("insert_job", args, options)
    driver = insert_compat.driver_of(conn)
    if driver in insert_compat.ASYNC_DRIVERS:
        row = await insert_compat.insert_async(conn, driver, values)
        return _counted(conn, driver, _with_outcome(row, options))
    raise TypeError(
        "insert_job() requires an async connection; use insert_job_sync() for sync "
        f"psycopg, SQLAlchemy or Django connections. Got: {type(conn).__qualname__}"
    )


def insert_job_sync(conn: Any, args: Any, **options: Unpack[BridgeOptions]) -> dict[str, Any]:
    """Insert a job on a sync connection (psycopg, SQLAlchemy, Django), inside its
    current transaction. An async connection raises ``TypeError``."""
    values = _prepare("insert_job_sync", args, options)
    driver = insert_compat.driver_of(conn)
    if driver in insert_compat.SYNC_DRIVERS:
        row = insert_compat.insert_sync(conn, driver, values)
        return _counted(conn, driver, _with_outcome(row, options))
    raise TypeError(
        "insert_job_sync() requires a sync connection; use insert_job() for asyncpg, "
        f"psycopg async or SQLAlchemy async connections. Got: {type(conn).__qualname__}"
    )
