"""Create and drop whole databases on a server (``awa dev``'s scratch database, the
testing helpers' throw-away ones), through a maintenance connection to ``server_url``.

Failures raise :class:`~awa.domain.errors.DatabaseError` with the server's message,
any password in ``server_url`` masked.

``DROP DATABASE`` forces a checkpoint and waits for it: a fraction of a second on a quiet
server, tens of seconds on a busy one. :func:`drop_database_in_background` keeps that
off the caller's time: the statement is sent on a thread at once, and the server finishes
it whether or not the process is still there to read the answer.
"""

from __future__ import annotations

import atexit
import logging
import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from awa.adapters._pg.conninfo import scrub
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import DatabaseError


def _statement(name: str, database: str, template: str | None = None) -> sql.Composed:
    text = load_queries("awa.adapters._pg", "databases.sql")[name]
    if template is None:
        return sql.SQL(text).format(name=sql.Identifier(database))
    return sql.SQL(text).format(name=sql.Identifier(database), template=sql.Identifier(template))


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


async def create_database(server_url: str, database: str, *, template: str | None = None) -> None:
    """:func:`create_database_sync` without blocking the event loop; with ``template``, a
    copy of that database."""
    statement = (
        _statement("create_database", database)
        if template is None
        else _statement("create_database_from", database, template)
    )
    with _refused(server_url):
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(statement)


async def drop_database(server_url: str, database: str) -> None:
    """:func:`drop_database_sync` without blocking the event loop."""
    with _refused(server_url):
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(_statement("drop_database", database))


async def disconnect_database(server_url: str, database: str) -> None:
    """End every session on ``database`` now (its clients see their connection closed)."""
    with _refused(server_url):
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(_statement("disconnect_database", database), (database,))


_log = logging.getLogger("awa.testing")


class _BackgroundDrops:
    """The drops handed off by this process: each on a thread of its own, so drops
    asked for together wait on one checkpoint. At exit the process waits only until
    every one has been sent, not for the checkpoints: with the session's
    ``client_connection_check_interval`` at 0 the server never looks for the gone
    client while it drops, and finishes the statement."""

    def __init__(self) -> None:
        self._unsent: set[str] = set()
        self._sent = threading.Condition()
        self._registered = False

    def submit(self, server_url: str, database: str) -> None:
        with self._sent:
            if not self._registered:
                atexit.register(self.wait_sent)
                self._registered = True
            self._unsent.add(database)
        threading.Thread(
            target=self._drop, args=(server_url, database), name="awa-drop", daemon=True
        ).start()

    def _drop(self, server_url: str, database: str) -> None:
        try:
            with psycopg.connect(server_url, autocommit=True) as conn:
                if conn.info.server_version >= 140000:
                    conn.execute("SET client_connection_check_interval = 0")
                statement = _statement("drop_database", database).as_bytes(conn)
                pgconn = conn.pgconn
                pgconn.send_query(statement)  # a blocking connection: sent on return
                self._mark_sent(database)
                # Wait for the answer outside libpq, which would hold the interpreter
                # lock (and so the process's exit) until the checkpoint is done.
                while True:
                    select.select([pgconn.socket], [], [])
                    pgconn.consume_input()
                    if not pgconn.is_busy():
                        break
                result = pgconn.get_result()
                while pgconn.get_result() is not None:
                    pass
                if result is not None and result.error_message:
                    message = result.error_message.decode(errors="replace").strip()
                    _log.warning("dropping %s failed: %s", database, scrub(message, server_url))
        except psycopg.Error as exc:
            _log.warning("dropping %s failed: %s", database, scrub(str(exc), server_url))
        finally:
            self._mark_sent(database)

    def _mark_sent(self, database: str) -> None:
        with self._sent:
            self._unsent.discard(database)
            self._sent.notify_all()

    def wait_sent(self, timeout: float = 30.0) -> bool:
        """Until every drop handed off has reached the server (True), or ``timeout``."""
        with self._sent:
            return self._sent.wait_for(lambda: not self._unsent, timeout)


_background = _BackgroundDrops()


def wait_sent(timeout: float = 30.0) -> bool:
    """Until every drop handed to :func:`drop_database_in_background` has reached the
    server (True), or ``timeout``."""
    return _background.wait_sent(timeout)


def drop_database_in_background(server_url: str, database: str) -> None:
    """Drop ``database`` without waiting: the statement goes to the server on a thread
    now; the server finishes it even if this process exits first (which waits only for
    it to be sent). Callers end the database's sessions first
    (:func:`disconnect_database`). A failure is logged (logger ``awa.testing``)."""
    _background.submit(server_url, database)
