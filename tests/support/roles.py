"""Least-privilege databases: a role that owns its database but is not a superuser.

Managed Postgres (RDS, Cloud SQL, AlloyDB) never hands out superuser; the application's
role owns its database and nothing more. :func:`owned_database` makes such a role and a
database it owns, and hands both to the session's :class:`DatabaseFactory` afterwards,
which disconnects them at once and drops them in the background (a ``DROP DATABASE``
waits for a checkpoint: tens of seconds on a busy server, not the test's to wait for).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.pg import TEST_DB_PREFIX, DatabaseFactory

ROLE_PREFIX = "awa_test_owner_"


@contextmanager
def owned_database(
    databases: DatabaseFactory, *, connection_limit: int | None = None
) -> Iterator[str]:
    """A new ``NOSUPERUSER`` login role (``CONNECTION LIMIT`` when given) and a new
    database it owns, on the server of ``databases``; yields a connection string that
    logs in as the role."""
    server_url = databases.server_url
    suffix = uuid.uuid4().hex[:12]
    role = f"{ROLE_PREFIX}{suffix}"
    database = f"{TEST_DB_PREFIX}owned_{suffix}"
    password = secrets.token_hex(12)
    limit = -1 if connection_limit is None else connection_limit
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL(
                "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                "CONNECTION LIMIT {} PASSWORD {}"
            ).format(sql.Identifier(role), sql.Literal(limit), sql.Literal(password))
        )
        try:
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                    sql.Identifier(database), sql.Identifier(role)
                )
            )
        except BaseException:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
            raise
    url = make_conninfo(server_url, dbname=database, user=role, password=password)
    try:
        yield url
    finally:
        databases.release(url, roles=[role])
