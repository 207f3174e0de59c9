"""``awa.ports.LeaderLock``: the maintenance leader's lease, a row in ``awa.leader_leases``
(ADR 0014).

Each call is one autocommit statement on the server's clock; nothing lives in the session,
so it works through a transaction-mode pooler. The candidate keeps one connection per
event loop that uses it (the maintenance thread has its own loop) and drops it after any
failure, so the next call reconnects. A call that takes longer than the lease's ttl is
abandoned: its answer could no longer be acted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import psycopg

from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import DatabaseError
from awa.domain.leadership import DEFAULT_LEASE_TTL, Lease

#: The lease every runtime of a database competes for.
MAINTENANCE_LEASE = "maintenance"


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "leader.sql")[name].encode()


def candidate_name() -> str:
    """``host/pid/random``: which process holds the lease, readable by operators."""
    return f"{socket.gethostname()[:120]}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@attrs.frozen
class LeaseRow:
    """The lease as stored (``awa health`` shows it)."""

    holder: str
    term: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    live: bool
    expires_in: float


async def read_lease(conn: DictConnection, name: str = MAINTENANCE_LEASE) -> LeaseRow | None:
    """The stored lease ``name`` (``None`` before anybody held it)."""
    try:
        cur = await conn.execute(_query("current"), {"name": name})
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise map_error(exc) from exc
    return None if row is None else LeaseRow(**row)


class PostgresLeaderLock:
    """One candidate for the lease ``name``; ``holder`` names it in the row."""

    def __init__(
        self,
        database_url: str,
        *,
        name: str = MAINTENANCE_LEASE,
        holder: str | None = None,
    ) -> None:
        self._url = database_url
        self._name = name
        self.holder = holder or candidate_name()
        self._conn: DictConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeout = DEFAULT_LEASE_TTL

    async def try_acquire(self, ttl: float) -> Lease:
        """Take or renew the lease for ``ttl`` seconds (see the port)."""
        self._timeout = ttl
        row = await self._one(_query("acquire"), {"ttl": ttl})
        if row is None:
            # Nobody held it and the insert raced another candidate's: try again later.
            return Lease(held=False, expires_in=0.0)
        return Lease(
            held=bool(row["held"]),
            expires_in=float(row["expires_in"]),
            term=int(row["term"]),
            holder=str(row["holder"]),
        )

    async def still_held(self) -> bool:
        """Whether the row names this candidate with an unexpired lease."""
        try:
            row = await self._one(_query("held"), {})
        except DatabaseError:
            return False
        return row is not None and bool(row["held"])

    async def release(self) -> None:
        """End the lease now if held. From a loop that does not own the cached connection
        (a closer on the main loop after the maintenance thread ended) it uses a fresh one."""
        with contextlib.suppress(DatabaseError):
            await self._one(_query("release"), {}, fetch=False)
        await self._drop()

    async def _one(
        self, sql: bytes, params: Mapping[str, Any], *, fetch: bool = True
    ) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(self._timeout):
                conn = await self._connection()
                cur = await conn.execute(sql, {"name": self._name, "holder": self.holder, **params})
                return await cur.fetchone() if fetch else None
        except TimeoutError:
            await self._drop()
            raise DatabaseError(
                f"the leader lease statement took longer than the lease ({self._timeout:g} s)"
            ) from None
        except psycopg.Error as exc:
            await self._drop()
            raise map_error(exc) from exc

    async def _connection(self) -> DictConnection:
        loop = asyncio.get_running_loop()
        if self._conn is not None and (self._loop is not loop or self._conn.closed):
            # A connection of another (possibly finished) loop cannot be used here; it
            # closes when collected.
            self._conn = None
        if self._conn is None:
            self._conn = await connect(self._url)
            self._loop = loop
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed and self._loop is asyncio.get_running_loop():
            with contextlib.suppress(Exception):
                await conn.close()
