"""``awa.ports.Notifier`` over Postgres LISTEN/NOTIFY on a dedicated connection."""

from __future__ import annotations

import psycopg
from psycopg import sql

from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, connect


class PostgresSubscription:
    """One LISTEN connection; channels that fired are collected between waits."""

    def __init__(self, conn: DictConnection) -> None:
        self._conn = conn

    async def wait(self, timeout: float) -> set[str]:
        """Channels that fired within ``timeout`` seconds (empty set on timeout).

        Returns as soon as the first notifications are read, with every channel that came
        in the same read: a wake-up is on the path of a job's pickup, so it does not wait
        another turn of the event loop to look for more (the next call returns those at
        once)."""
        fired: set[str] = set()
        try:
            async for notify in self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
                fired.add(notify.channel)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        return fired

    async def close(self) -> None:
        """Stop listening and close the connection."""
        await self._conn.close()


class PostgresNotifier:
    """Opens one dedicated connection per subscription (LISTEN is per session)."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url

    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """LISTEN on ``channels`` (e.g. ``awa:email``, ``awa:cancel``)."""
        conn = await connect(self._url)
        try:
            for channel in channels:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error as exc:
            await conn.close()
            raise map_error(exc) from exc
        return PostgresSubscription(conn)
