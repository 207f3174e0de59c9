"""Server sessions kept between the contract suite's engines (ADR 0003).

Every contract test opens fresh engines, and a fresh engine opens fresh connections. A
new Postgres backend is expensive before it has done anything: it loads the catalog of
every table and ring partition it touches and plans every statement anew. On a queue
storage database the first claim on a new backend took 160 ms, the first reset 85 ms
and the first insert 30 ms, against a few ms each on a backend that had run them before:
about 0.3 s of every Postgres contract test went there.

:class:`BackendRecycler` keeps those backends and nothing else. When a connection to a
database it was told about (:meth:`~BackendRecycler.allow`) is closed while idle, it runs
``DISCARD ALL`` on it (what a pooler runs between clients: it releases advisory locks,
stops listening, drops temporary tables, prepared statements and cached plans, and resets
every session setting, the role included), keeps the libpq connection and leaves the
psycopg connection closed. The next connection opened to the same connection string
gets that backend under a new psycopg connection object (empty prepared-statement cache,
its own handlers), so the engines, their pools and everything psycopg remembers per
connection are as new as before; only the backend's caches carry over, which nothing can
observe but their speed. A backend a test terminated is noticed (its socket is readable)
and closed instead of handed out; one that fails ``DISCARD ALL`` or is not idle when
closed is closed as before. A released database's kept backends are closed first.

Installed by the contract suite's conftest for its session databases only.
"""

from __future__ import annotations

import select
import threading
import weakref
from collections.abc import Callable, Generator
from typing import Any

import psycopg
from psycopg import generators, pq
from psycopg.conninfo import conninfo_to_dict

from tests.support.pg import on_release

#: The most backends kept per connection string, and in all: idle sessions count against
#: the server's ``max_connections``, which the suite's workers are sized by.
KEPT_PER_TARGET = 6
KEPT_IN_ALL = 40


def _dead_pgconn() -> pq.abc.PGconn:
    """A libpq connection that is closed (status ``BAD``), for a psycopg connection whose
    backend went back to the recycler: it reads as closed and refuses every use."""
    conn = pq.PGconn.connect_start(b"host=/nonexistent-awa-recycler port=1")
    conn.finish()
    return conn


class BackendRecycler:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._databases: set[str] = set()
        self._ports: set[str] = set()
        #: Idle backends by the exact connection string they were opened with.
        self._idle: dict[str, list[pq.abc.PGconn]] = {}
        #: The connection string of every open backend this recycler may keep.
        self._target: weakref.WeakKeyDictionary[pq.abc.PGconn, str] = weakref.WeakKeyDictionary()
        self.reused = 0
        self._undo: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ scope
    def allow(self, database_url: str) -> None:
        """Keep the backends of connections to the database at ``database_url`` (by its
        name and port: the same database through a pooler is not one of them)."""
        with self._lock:
            self._databases.add(_dbname(database_url))
            self._ports.add(_port(database_url))

    def forget(self, database: str) -> None:
        """Close the kept backends of ``database`` and keep no more of them."""
        with self._lock:
            self._databases.discard(database)
            gone = {t: conns for t, conns in self._idle.items() if _dbname(t) == database}
            for target in gone:
                del self._idle[target]
        for conns in gone.values():
            for pgconn in conns:
                self._finish(pgconn)

    def idle(self, database_url: str) -> int:
        """How many backends of the database at ``database_url`` are kept idle."""
        database = _dbname(database_url)
        with self._lock:
            return sum(len(c) for t, c in self._idle.items() if _dbname(t) == database)

    # --------------------------------------------------------------- patching
    def install(self) -> None:
        """Route psycopg's connection opening and async closing through this recycler."""
        if self._undo:
            return
        original_connect = generators.connect
        original_close = psycopg.AsyncConnection.close
        recycler = self

        def connect(conninfo: str, *args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            kept = recycler._take(conninfo)
            if kept is not None:
                return kept
            pgconn = yield from original_connect(conninfo, *args, **kwargs)
            recycler._opened(conninfo, pgconn)
            return pgconn

        async def close(self: psycopg.AsyncConnection[Any]) -> None:
            if not self.closed and recycler._park(self):
                return
            await original_close(self)

        generators.connect = connect
        psycopg.AsyncConnection.close = close  # type: ignore[method-assign]
        on_release(self.forget)

        def undo() -> None:
            generators.connect = original_connect
            psycopg.AsyncConnection.close = original_close  # type: ignore[method-assign]

        self._undo.append(undo)

    def uninstall(self) -> None:
        """Undo :meth:`install` and close every kept backend."""
        while self._undo:
            self._undo.pop()()
        with self._lock:
            idle, self._idle = self._idle, {}
            self._databases.clear()
        for conns in idle.values():
            for pgconn in conns:
                self._finish(pgconn)

    # -------------------------------------------------------------- internals
    def _opened(self, conninfo: str, pgconn: pq.abc.PGconn) -> None:
        with self._lock:
            if self._wanted(conninfo):
                self._target[pgconn] = conninfo

    def _wanted(self, conninfo: str) -> bool:
        return _dbname(conninfo) in self._databases and _port(conninfo) in self._ports

    def _take(self, conninfo: str) -> pq.abc.PGconn | None:
        while True:
            with self._lock:
                conns = self._idle.get(conninfo)
                if not conns:
                    return None
                pgconn = conns.pop()
            if _alive(pgconn):
                with self._lock:
                    self._target[pgconn] = conninfo
                    self.reused += 1
                return pgconn
            self._finish(pgconn)

    def _park(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Keep the backend of ``conn``, which its owner is closing, if it is clean and
        wanted; then ``conn`` reads as closed. False: close it as usual."""
        pgconn = conn.pgconn
        with self._lock:
            target = self._target.pop(pgconn, None)
            if target is None or not self._wanted(target):
                return False
            full = (
                len(self._idle.get(target, ())) >= KEPT_PER_TARGET
                or sum(map(len, self._idle.values())) >= KEPT_IN_ALL
            )
        if full or getattr(conn, "_pool", None) is not None or not _idle(pgconn):
            return False
        result = pgconn.exec_(b"DISCARD ALL")
        if result.status != pq.ExecStatus.COMMAND_OK or not _idle(pgconn):
            return False
        while pgconn.notifies() is not None:
            pass  # anything that arrived before UNLISTEN was meant for the closed one
        conn.pgconn = _dead_pgconn()
        conn._closed = True
        with self._lock:
            self._idle.setdefault(target, []).append(pgconn)
        return True

    def _finish(self, pgconn: pq.abc.PGconn) -> None:
        with self._lock:
            self._target.pop(pgconn, None)
        pgconn.finish()


def _dbname(conninfo: str) -> str:
    return str(conninfo_to_dict(conninfo).get("dbname", ""))


def _port(conninfo: str) -> str:
    return str(conninfo_to_dict(conninfo).get("port") or "5432")


def _idle(pgconn: pq.abc.PGconn) -> bool:
    return (
        pgconn.status == pq.ConnStatus.OK
        and pgconn.transaction_status == pq.TransactionStatus.IDLE
        and pgconn.pipeline_status == pq.PipelineStatus.OFF
    )


def _alive(pgconn: pq.abc.PGconn) -> bool:
    """Whether a kept backend is still there: an idle session has nothing to say, so a
    readable socket means it was terminated (or sent something no one expects)."""
    if not _idle(pgconn):
        return False
    try:
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
    except (OSError, psycopg.OperationalError):
        return False
    return not readable
