"""``awa.ports.LeaderLock``: a session advisory lock held on a dedicated connection.

Leadership lasts as long as the connection: if the process dies or the connection drops,
Postgres releases the lock and another runtime can take over.
"""

from __future__ import annotations

import contextlib

import psycopg

from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, connect

#: The cluster-wide maintenance leader key ("AWA_MAIN").
LEADER_LOCK_KEY = 0x4157415F4D41494E


class PostgresLeaderLock:
    """Try-lock without waiting; ``still_held`` checks the holding session is alive."""

    def __init__(self, database_url: str, *, key: int = LEADER_LOCK_KEY) -> None:
        self._url = database_url
        self._key = key
        self._conn: DictConnection | None = None

    async def try_acquire(self) -> bool:
        """Become leader if nobody is; True again while already held."""
        if self._conn is not None and await self.still_held():
            return True
        await self._drop()
        conn = await connect(self._url)
        try:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS won", (self._key,))
            row = await cur.fetchone()
        except psycopg.Error as exc:
            await conn.close()
            raise map_error(exc) from exc
        if row is None or not row["won"]:
            await conn.close()
            return False
        self._conn = conn
        return True

    async def still_held(self) -> bool:
        """Whether our session still exists and holds the lock."""
        if self._conn is None or self._conn.closed:
            return False
        try:
            cur = await self._conn.execute(
                "SELECT EXISTS ("
                " SELECT 1 FROM pg_locks"
                " WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
                " AND ((classid::bigint << 32) | objid::bigint) = %s"
                ") AS held",
                (self._key,),
            )
            row = await cur.fetchone()
        except psycopg.Error:
            await self._drop()
            return False
        return row is not None and bool(row["held"])

    async def release(self) -> None:
        """Give up leadership (closing the session releases the lock)."""
        if self._conn is not None and not self._conn.closed:
            # If the session is already gone, so is the lock.
            with contextlib.suppress(psycopg.Error):
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
        await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            await conn.close()
