"""``awa.insert_job_compat`` on a connection the caller owns (psycopg, asyncpg,
SQLAlchemy, Django), inside the caller's transaction.

The one statement is in ``insert_compat.sql`` with named placeholders; each driver gets
it in its own placeholder style, with the parameters in the same order. This module
knows the drivers; what a job may contain is checked before it is called.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from awa.adapters._pg.sql import load_queries

Style = Literal["pyformat", "dollar", "named"]

ASYNC_DRIVERS = frozenset({"asyncpg_async", "psycopg_async", "sqlalchemy_async"})
SYNC_DRIVERS = frozenset({"psycopg_sync", "django_sync", "sqlalchemy_sync"})

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _template() -> str:
    return load_queries("awa.adapters._pg", "insert_compat.sql")["insert_job_compat"]


@functools.cache
def parameters() -> tuple[str, ...]:
    """The statement's parameter names, in placeholder order (each appears once)."""
    names = tuple(_PLACEHOLDER.findall(_template()))
    if len(set(names)) != len(names):
        raise ValueError("insert_compat.sql names a parameter twice")
    return names


@functools.cache
def statement(style: Style) -> str:
    """The statement with ``%s`` (psycopg, Django), ``$1..$n`` (asyncpg) or ``:name``
    (SQLAlchemy) placeholders."""
    order = {name: index for index, name in enumerate(parameters())}

    def placeholder(match: re.Match[str]) -> str:
        name = match.group(1)
        if style == "pyformat":
            return "%s"
        if style == "dollar":
            return f"${order[name] + 1}"
        return f":{name}"

    return _PLACEHOLDER.sub(placeholder, _template())


def _positional(params: Mapping[str, Any]) -> list[Any]:
    names = parameters()
    if set(params) != set(names):
        missing = sorted(set(names) - set(params))
        extra = sorted(set(params) - set(names))
        raise ValueError(f"insert_job_compat parameters: missing {missing}, unexpected {extra}")
    return [params[name] for name in names]


def driver_of(conn: Any) -> str:
    """``asyncpg``, ``psycopg``, ``sqlalchemy`` or ``django`` plus ``_async`` / ``_sync``;
    ``TypeError`` for anything else."""
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

    return text(statement("named"))


async def insert_async(conn: Any, driver: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Run the statement on an async connection of ``driver`` (one of
    :data:`ASYNC_DRIVERS`); returns the inserted row."""
    if driver == "asyncpg_async":
        record = await conn.fetchrow(statement("dollar"), *_positional(params))
        return _decode_json(dict(record))
    if driver == "psycopg_async":
        cursor = conn.cursor()
        try:
            await cursor.execute(statement("pyformat"), _positional(params))
            row = await cursor.fetchone()
            return _decode_json(_cursor_row(cursor.description, row))
        finally:
            await cursor.close()
    if driver == "sqlalchemy_async":
        _positional(params)
        result = await conn.execute(_sqlalchemy_statement(), dict(params))
        return _decode_json(dict(result.mappings().one()))
    raise ValueError(f"{driver} is not an async driver")


def insert_sync(conn: Any, driver: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Run the statement on a sync connection of ``driver`` (one of
    :data:`SYNC_DRIVERS`); returns the inserted row."""
    if driver in ("psycopg_sync", "django_sync"):
        with conn.cursor() as cursor:
            cursor.execute(statement("pyformat"), _positional(params))
            row = cursor.fetchone()
            return _decode_json(_cursor_row(cursor.description, row))
    if driver == "sqlalchemy_sync":
        _positional(params)
        result = conn.execute(_sqlalchemy_statement(), dict(params))
        return _decode_json(dict(result.mappings().one()))
    raise ValueError(f"{driver} is not a sync driver")


def when_committed(conn: Any, driver: str, action: Callable[[], None]) -> bool:
    """Run ``action`` once the caller's transaction holding the insert commits, and never
    if it rolls back. Returns ``False`` where the driver cannot tell: psycopg and asyncpg
    inside a transaction the caller has open give no commit hook (with no transaction
    open, the insert is already committed and ``action`` runs now)."""
    if driver in ("psycopg_sync", "psycopg_async"):
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status == TransactionStatus.IDLE:
            action()
            return True
        return False
    if driver == "asyncpg_async":
        if not conn.is_in_transaction():
            action()
            return True
        return False
    if driver == "django_sync":
        from django.db import transaction

        transaction.on_commit(action, using=conn.alias)
        return True
    if driver in ("sqlalchemy_sync", "sqlalchemy_async"):
        _sqlalchemy_when_committed(conn, action)
        return True
    raise ValueError(f"unknown driver {driver}")


def _sqlalchemy_when_committed(conn: Any, action: Callable[[], None]) -> None:
    """SQLAlchemy: one-shot listeners on the connection's (or session's) next commit and
    rollback; whichever comes first settles it, and the other then does nothing."""
    from sqlalchemy import event

    target = getattr(conn, "sync_connection", None) or getattr(conn, "sync_session", None) or conn
    session = hasattr(target, "get_bind")
    settled = False

    def committed(*_: Any) -> None:
        nonlocal settled
        if not settled:
            settled = True
            action()

    def rolled_back(*_: Any) -> None:
        nonlocal settled
        settled = True

    event.listen(target, "after_commit" if session else "commit", committed, once=True)
    event.listen(target, "after_rollback" if session else "rollback", rolled_back, once=True)
