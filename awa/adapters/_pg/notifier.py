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

import asyncio
import contextlib
import math
import secrets
from collections import deque

import psycopg
from psycopg import sql
from psycopg.pq import ConnStatus

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


class PostgresSubscription:
    """One LISTEN connection, read by the event loop as soon as its socket has data.

    The subscription asks the loop to call it whenever the connection's socket is
    readable; each call takes in what the server sent and keeps the notifications in
    arrival order until a wait collects them. A wait on a quiet connection is one wait on
    an event: it holds no lock of the connection and sets up no read of its own, which
    the listener of a busy worker would otherwise do once per notification (ADR 0041).
    Nothing else runs statements on this connection once it listens."""

    def __init__(self, conn: DictConnection, fired: set[str] | None = None) -> None:
        self._conn = conn
        self._encoding = conn.info.encoding
        # Announcements that arrived while the subscription proved itself (no payload).
        self._received: deque[tuple[str, str]] = deque((channel, "") for channel in fired or ())
        self._arrived = asyncio.Event()
        self._failure: psycopg.Error | None = None
        self._reader: tuple[asyncio.AbstractEventLoop, int] | None = None

    def _read_socket(self) -> None:
        """Called by the loop when the socket is readable (and once when reading starts):
        take in what arrived and keep its notifications; a broken connection is kept as
        the failure the next wait raises."""
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
            while (notify := pgconn.notifies()) is not None:
                channel = notify.relname.decode(self._encoding)
                if not channel.startswith(PROBE_PREFIX):
                    self._received.append((channel, notify.extra.decode(self._encoding)))
            if pgconn.status != ConnStatus.OK:
                raise psycopg.OperationalError("the listening connection is closed")
        except psycopg.Error as exc:
            self._failure = exc
            self._stop_reading()
        if self._received or self._failure is not None:
            self._arrived.set()

    def _start_reading(self) -> None:
        if self._reader is not None or self._failure is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            fileno = self._conn.pgconn.socket
        except psycopg.Error as exc:
            self._failure = exc
            return
        loop.add_reader(fileno, self._read_socket)
        self._reader = (loop, fileno)
        # What the socket or libpq already held while no one was reading.
        self._read_socket()

    def _stop_reading(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            loop, fileno = reader
            loop.remove_reader(fileno)

    async def _collect(self, timeout: float) -> list[tuple[str, str]]:
        """Every ``(channel, payload)`` received so far, waiting up to ``timeout`` seconds
        (``math.inf``: until one arrives or the caller cancels) when there is none yet.
        Raises the connection's failure once what came before it has been collected."""
        self._start_reading()
        if not self._received and self._failure is None and timeout > 0:
            self._arrived.clear()
            if math.isinf(timeout):
                await self._arrived.wait()
            else:
                # asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for returns
                # when the event is set in the same turn of the loop as the caller is
                # cancelled, and the cancel is lost (a listener cancelled that way read
                # on forever, and whoever awaited its end hung).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._arrived.wait()
        if not self._received and self._failure is not None:
            raise map_error(self._failure) from self._failure
        found = list(self._received)
        self._received.clear()
        return found

    async def wait(self, timeout: float) -> set[str]:
        """Channels that fired within ``timeout`` seconds (empty set on timeout;
        ``math.inf``: until one fires or the caller cancels, as the runtime's listener
        does with a bound on its own clock).

        Returns as soon as the first notifications are read, with every channel that came
        in the same read: a wake-up is on the path of a job's pickup, so it does not wait
        another turn of the event loop to look for more (the next call returns those at
        once)."""
        return {channel for channel, _ in await self._collect(timeout)}

    async def payloads(self, timeout: float) -> list[tuple[str, str]]:
        """The ``(channel, payload)`` of every notification read within ``timeout``
        seconds, in arrival order (probes left out; an empty list on timeout), for a
        listener that routes by payload. Returns once the first are read, like
        :meth:`wait`."""
        return await self._collect(timeout)

    async def close(self) -> None:
        """Stop listening and close the connection; a wait still running raises."""
        self._stop_reading()
        if self._failure is None:
            self._failure = psycopg.OperationalError("the subscription was closed")
        self._arrived.set()
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
