"""The :class:`~awa.ports.results.ResultStore` port on ``awa.job_results``, shared by
both Postgres engines (the table lives in schema ``awa`` whatever the engine, apart from
the job rows, so queue storage's reclaim of finished history does not touch it).

Finishes are announced on one channel (``awa:results``, the job id as payload, followed
by `` completed`` when the job's completion is committed). A store
keeps one ``LISTEN`` connection for all its current waiters (opened with the first,
closed with the last) and wakes only the waiters of the announced job; the results the
woken waiters read go through one reader (``_ResultReader``), in one statement per
burst, so they do not queue for a pool connection each."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import WakeupsUnavailable
from awa.domain.results import (
    COMPLETED_PAYLOAD,
    RESULT_RETENTION,
    RESULTS_CHANNEL,
    StoredResult,
    announced_channels,
)
from awa.ports.clock import Clock

#: How long the shared listener waits for notifications per read (it is cancelled when
#: the last waiter leaves, so this only bounds one read).
_READ_SECONDS = 60.0


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "results.sql")[name].encode()


class _Waiter:
    """One waiter's subscription on the shared listener (the ``Subscription`` port)."""

    def __init__(self, store: PgResultStore, listener: _Listener, job_id: int) -> None:
        self._store = store
        self._listener = listener
        self.job_id = job_id
        self._event = asyncio.Event()
        self._completed = False

    def fire(self, completed: bool = False) -> None:
        self._completed = self._completed or completed
        self._event.set()

    async def wait(self, timeout: float) -> set[str]:
        if not self._event.is_set() and timeout > 0:
            # Measured on the store's clock (ADR 0025), as the port says.
            with self._store.clock.move_on_after(timeout):
                await self._event.wait()
        if not self._event.is_set():
            return set()
        self._event.clear()
        completed, self._completed = self._completed, False
        return set(announced_channels(self.job_id, completed=completed))

    async def close(self) -> None:
        await self._store._leave(self._listener, self)


class _Listener:
    """``LISTEN awa:results`` on a dedicated connection, routing payloads to waiters."""

    def __init__(self, subscription: PostgresSubscription) -> None:
        self._subscription = subscription
        self.waiters: dict[int, set[_Waiter]] = {}
        #: Set when the connection failed: its waiters were woken, later ones get a new one.
        self.broken = False
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                for _, payload in await self._subscription.payloads(_READ_SECONDS):
                    head, _, word = payload.partition(" ")
                    try:
                        job_id = int(head)
                    except ValueError:
                        continue
                    for waiter in self.waiters.get(job_id, ()):
                        waiter.fire(completed=word == COMPLETED_PAYLOAD)
        except Exception:
            # The waiters re-read the job now and poll from then on.
            self.broken = True
            for waiters in self.waiters.values():
                for waiter in waiters:
                    waiter.fire()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        with contextlib.suppress(Exception):
            await self._subscription.close()


class _ResultReader:
    """One reader for every ``get_result`` of a store: the reads asked for while one is
    in flight wait for it and then go together in the next statement, so the waiters a
    burst of completions wakes hold one pool connection between them, not one each."""

    def __init__(self, read: Callable[[list[int]], Awaitable[dict[int, StoredResult]]]) -> None:
        self._read = read
        self._asked: dict[int, list[asyncio.Future[StoredResult | None]]] = {}
        self._task: asyncio.Task[None] | None = None
        #: How many statements read results, and how many reads they answered.
        self.statements = 0
        self.reads = 0

    async def get(self, job_id: int) -> StoredResult | None:
        answer: asyncio.Future[StoredResult | None] = asyncio.get_running_loop().create_future()
        self._asked.setdefault(job_id, []).append(answer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return await answer

    async def _run(self) -> None:
        while self._asked:
            asked, self._asked = self._asked, {}
            self.statements += 1
            self.reads += sum(map(len, asked.values()))
            try:
                found = await self._read(sorted(asked))
            except asyncio.CancelledError:
                for answers in asked.values():
                    for answer in answers:
                        answer.cancel()
                raise
            except Exception as exc:
                for answers in asked.values():
                    for answer in answers:
                        if not answer.done():
                            answer.set_exception(exc)
                continue
            for job_id, answers in asked.items():
                for answer in answers:
                    if not answer.done():
                        answer.set_result(found.get(job_id))


class PgResultStore:
    """:class:`~awa.ports.results.ResultStore` on ``awa.job_results`` (one per backend, on
    its pool). Waiters share one ``LISTEN`` connection to the pool's database, proved by
    a test notification; behind a transaction-mode pooler there is none and they poll."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection], clock: Clock) -> None:
        self._pool = pool
        self._clock = clock
        # Set once a subscription could not be proved (a transaction-mode pooler), so
        # later waiters poll at once instead of paying the probe's timeout each.
        self._no_wakeups = False
        self._listener: _Listener | None = None
        self._lock: asyncio.Lock | None = None
        self._reader = _ResultReader(self._read_results)

    @property
    def clock(self) -> Clock:
        return self._clock

    async def store_result(self, job_id: int, json_text: str, *, kind: str | None = None) -> None:
        now = self._clock.now()
        params = {
            "job_id": job_id,
            "kind": kind,
            "result": json_text,
            "now": now,
            "expires_at": now + RESULT_RETENTION,
        }
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_query("store_result"), params)

    async def get_result(self, job_id: int) -> StoredResult | None:
        return await self._reader.get(job_id)

    async def _read_results(self, job_ids: list[int]) -> dict[int, StoredResult]:
        """The stored, unexpired results of ``job_ids``, in one statement."""
        params = {"job_ids": job_ids, "now": self._clock.now()}
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("get_results"), params)
            rows = await cur.fetchall()
        return {
            int(row["job_id"]): StoredResult(
                job_id=int(row["job_id"]),
                json_text=str(row["result"]),
                stored_at=row["stored_at"],
                expires_at=row["expires_at"],
                kind=row["kind"],
            )
            for row in rows
        }

    async def announce_finished(self, job_id: int, *, completed: bool = False) -> None:
        payload = f"{job_id} {COMPLETED_PAYLOAD}" if completed else str(job_id)
        params = {"channel": RESULTS_CHANNEL, "job_id": payload}
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_query("announce_finished"), params)

    async def subscribe_finished(self, job_id: int) -> _Waiter | None:
        if self._no_wakeups:
            return None
        conninfo = self._pool.conninfo
        if not isinstance(conninfo, str):  # a pool built on a conninfo callable: poll
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            listener = self._listener
            if listener is None or listener.broken:
                try:
                    notifier = PostgresNotifier(conninfo, clock=self._clock)
                    subscription = await notifier.subscribe([RESULTS_CHANNEL])
                except WakeupsUnavailable:
                    self._no_wakeups = True
                    return None
                listener = self._listener = _Listener(subscription)
            waiter = _Waiter(self, listener, job_id)
            listener.waiters.setdefault(job_id, set()).add(waiter)
            return waiter

    async def _leave(self, listener: _Listener, waiter: _Waiter) -> None:
        """Drop ``waiter``; the listener's connection closes with its last waiter."""
        assert self._lock is not None
        async with self._lock:
            waiters = listener.waiters.get(waiter.job_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del listener.waiters[waiter.job_id]
            if listener.waiters:
                return
            if self._listener is listener:
                self._listener = None
        await listener.close()

    async def prune_results(self, *, before: datetime) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("prune_results"), {"before": before})
            return cur.rowcount
