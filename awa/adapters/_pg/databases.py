"""Create and drop whole databases on a server (``awa dev``'s scratch database, the
testing helpers' throw-away ones), through a maintenance connection to ``server_url``.

Failures raise :class:`~awa.domain.errors.DatabaseError` with the server's message,
any password in ``server_url`` masked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from awa.adapters._pg.conninfo import scrub
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import DatabaseError


def _statement(name: str, database: str) -> sql.Composed:
    template = load_queries("awa.adapters._pg", "databases.sql")[name]
    return sql.SQL(template).format(name=sql.Identifier(database))


@contextmanager
def _refused(server_url: str) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise DatabaseError(scrub(str(exc).strip(), server_url)) from None


def create_database_sync(server_url: str, database: str) -> None:
    """``CREATE DATABASE database`` on the server of ``server_url``."""
    with _refused(server_url), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(_statement("create_database", database))


def drop_database_sync(server_url: str, database: str) -> None:
    """Drop ``database`` (closing its sessions) if it exists."""
    with _refused(server_url), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(_statement("drop_database", database))


async def create_database(server_url: str, database: str) -> None:
    """:func:`create_database_sync` without blocking the event loop."""
    with _refused(server_url):
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(_statement("create_database", database))


async def drop_database(server_url: str, database: str) -> None:
    """:func:`drop_database_sync` without blocking the event loop."""
    with _refused(server_url):
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(_statement("drop_database", database))
