"""``awa.ports.Notifier`` over Postgres LISTEN/NOTIFY on a dedicated connection.

A pooler in transaction mode runs ``LISTEN`` on whichever server session it lends for
that one statement, and hands that session to other clients afterwards: notifications
never come back to the listening client. So a subscription proves itself before it is
used: it sends a notification on a channel of its own through a second connection and
waits for it (:data:`PROBE_TIMEOUT` of the notifier's clock). When it does not arrive,
or the connection is declared to go through a transaction-mode pooler (where it does not
even try, so no server session is left listening), :meth:`PostgresNotifier.subscribe`
raises :class:`~awa.domain.errors.WakeupsUnavailable` and the runtime polls (ADR 0015).
"""

from __future__ import annotations

import math
import secrets

import psycopg
from psycopg import sql

from awa.adapters._pg.errors import map_error
from awa.adapters._pg.pool import DictConnection, Pooler, connect, declared_pooler
from awa.domain.errors import WakeupsUnavailable
from awa.ports.clock import Clock

#: How long a new subscription waits for its own test notification.
PROBE_TIMEOUT = 2.0
#: Test channels are ``awa:probe:<random>``: no route listens on them.
PROBE_PREFIX = "awa:probe:"

NO_WAKEUPS_FIX = (
    "give the workers a direct or session-mode connection for wake-ups "
    "(listen_database_url=, AWA_LISTEN_DATABASE_URL or awa worker --listen-database-url)"
)


def _seconds(timeout: float) -> float | None:
    """psycopg's wait for ``timeout``: ``None`` (no bound) for ``math.inf``."""
    return None if math.isinf(timeout) else max(timeout, 0.0)


class PostgresSubscription:
    """One LISTEN connection; channels that fired are collected between waits."""

    def __init__(self, conn: DictConnection, fired: set[str] | None = None) -> None:
        self._conn = conn
        # Announcements that arrived while the subscription proved itself.
        self._pending = set(fired or ())

    async def wait(self, timeout: float) -> set[str]:
        """Channels that fired within ``timeout`` seconds (empty set on timeout;
        ``math.inf``: until one fires or the caller cancels, as the runtime's listener
        does with a bound on its own clock).

        Returns as soon as the first notifications are read, with every channel that came
        in the same read: a wake-up is on the path of a job's pickup, so it does not wait
        another turn of the event loop to look for more (the next call returns those at
        once)."""
        if self._pending:
            fired, self._pending = self._pending, set()
            return fired
        fired = set()
        try:
            async for notify in self._conn.notifies(timeout=_seconds(timeout), stop_after=1):
                if not notify.channel.startswith(PROBE_PREFIX):
                    fired.add(notify.channel)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        return fired

    async def payloads(self, timeout: float) -> list[tuple[str, str]]:
        """The ``(channel, payload)`` of every notification read within ``timeout``
        seconds (probes left out; an empty list on timeout), for a listener that routes
        by payload. Returns once the first are read, like :meth:`wait`."""
        found: list[tuple[str, str]] = []
        try:
            async for notify in self._conn.notifies(timeout=_seconds(timeout), stop_after=1):
                if not notify.channel.startswith(PROBE_PREFIX):
                    found.append((notify.channel, notify.payload))
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        return found

    async def close(self) -> None:
        """Stop listening and close the connection."""
        await self._conn.close()


class PostgresNotifier:
    """Opens one dedicated connection per subscription (LISTEN is per session).

    ``database_url`` is where the subscription listens; ``probe_url`` (default: the
    same) is where its test notification is sent from, the database producers write to.
    The wait for that notification is measured on ``clock`` (ADR 0025), the runtime's
    when a runtime listens, the engine's when an engine hands out subscriptions."""

    def __init__(
        self,
        database_url: str,
        *,
        clock: Clock,
        probe_url: str | None = None,
        probe_timeout: float = PROBE_TIMEOUT,
    ) -> None:
        self._url = database_url
        self._clock = clock
        self._probe_url = probe_url or database_url
        self._probe_timeout = probe_timeout

    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """LISTEN on ``channels`` (e.g. ``awa:email``, ``awa:cancel``), once a test
        notification came back; :class:`WakeupsUnavailable` when none can."""
        if declared_pooler(self._url) is Pooler.TRANSACTION:
            raise WakeupsUnavailable(
                "the connection for wake-ups is declared to go through a transaction-mode "
                f"pooler, where LISTEN cannot work; {NO_WAKEUPS_FIX}"
            )
        conn = await connect(self._url)
        try:
            probe = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
            for channel in [*channels, probe]:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            fired = await self._prove(conn, probe)
        except psycopg.Error as exc:
            await conn.close()
            raise map_error(exc) from exc
        except BaseException:
            await conn.close()
            raise
        return PostgresSubscription(conn, fired)

    async def _prove(self, conn: DictConnection, probe: str) -> set[str]:
        """Send ``probe`` from another connection and wait for it on ``conn``; the other
        channels that fired meanwhile. Raises :class:`WakeupsUnavailable` on a timeout."""
        sender = await connect(self._probe_url)
        try:
            await sender.execute("SELECT pg_notify(%s, '')", (probe,))
        finally:
            await sender.close()
        fired: set[str] = set()
        # The probe waits for the network, so the host's time bounds it as well as the
        # notifier's clock: a manual clock that no one advances (a test's) must not hold a
        # subscription through a pooler forever.
        with self._clock.move_on_after(self._probe_timeout):
            async for notify in conn.notifies(timeout=self._probe_timeout):
                if notify.channel == probe:
                    return fired
                if not notify.channel.startswith(PROBE_PREFIX):
                    fired.add(notify.channel)
        raise WakeupsUnavailable(
            f"a test notification did not come back within {self._probe_timeout:g} s, so "
            "this connection does not receive notifications (a pooler in transaction mode "
            f"lends the session that ran LISTEN to other clients); {NO_WAKEUPS_FIX}"
        )
