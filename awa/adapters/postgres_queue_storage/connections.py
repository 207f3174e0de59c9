"""The connections of one queue-storage engine: its pool, the connections it keeps for
its hot statements, caller transactions, and whether it is closed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import attrs
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.piped import piped_transaction
from awa.adapters._pg.pool import DictConnection, connect
from awa.domain.errors import DatabaseError
from awa.ports.storage import UnitOfWork

# Connections an engine keeps, outside its pool, for each hot statement (the common claim,
# completion by receipt). Calls run one after another on the most recently used one,
# whose backend has the statement planned and its caches warm; a pooled connection comes
# round-robin and costs about 0.3 ms more per call. More calls at once than this take
# pooled connections.
KEPT_CONNECTIONS = 2

#: The hot statements that keep connections: the common claim and completion by receipt.
KEPT_PURPOSES = frozenset({"claim", "complete"})

#: The most connections one engine keeps outside its pool.
MAX_KEPT_CONNECTIONS = KEPT_CONNECTIONS * len(KEPT_PURPOSES)

log = logging.getLogger("awa.adapters.postgres_queue_storage")


class PgUnitOfWork:
    """A caller transaction on one pooled connection, owned by one engine."""

    def __init__(self, owner: object, conn: DictConnection) -> None:
        self.owner = owner
        self.conn = conn
        self.open = True
        self.channels: set[str] = set()


@attrs.define
class Kept:
    """The connections kept for one purpose: idle ones (most recent last), and how many
    are open (idle or in use)."""

    idle: list[DictConnection] = attrs.field(factory=list)
    open: int = 0
    #: Set while an idle one is lent out for a warm-up (:meth:`Connections.warm_kept`);
    #: a caller that finds none idle waits for it instead of opening a cold one.
    lent: asyncio.Event | None = None


async def settled(task: asyncio.Task[None] | None) -> None:
    """Wait for ``task`` to end, if there is one still running (engine shutdown)."""
    if task is not None and not task.done():
        await asyncio.wait([task])


class Connections:
    """Pooled connections, kept connections and caller transactions; refuses all of them
    once the engine is closed."""

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        *,
        prepare_kept: Callable[[DictConnection], Awaitable[None]] | None = None,
    ) -> None:
        self.pool = pool
        #: Run once on each kept connection when it opens (the engine's: its session
        #: plans generically, Statements.plan_generically).
        self._prepare_kept = prepare_kept
        self.closed = False
        # Connections kept for the hot statements, by purpose (claim, completion).
        self.kept: dict[str, Kept] = {}

    def check_open(self) -> None:
        if self.closed:
            raise DatabaseError("the queue-storage engine is closed")

    @asynccontextmanager
    async def conn(self) -> AsyncIterator[DictConnection]:
        """A pooled autocommit connection, for one statement that is its own transaction."""
        self.check_open()
        async with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def tx(self, *, pipeline: bool = False) -> AsyncIterator[DictConnection]:
        """One transaction on a pooled connection. With ``pipeline`` the statements are
        sent in pipeline mode, ``BEGIN`` and ``COMMIT`` queued with them
        (:func:`~awa.adapters._pg.piped.piped_transaction`): a transaction whose reads
        are one round trip costs two in all. Rolled back on any exception."""
        async with self.conn() as conn:
            if pipeline:
                async with piped_transaction(conn):
                    yield conn
            else:
                async with conn.transaction():
                    yield conn

    @asynccontextmanager
    async def unit_of_work(self, owner: object) -> AsyncIterator[UnitOfWork]:
        """A caller transaction for ``owner`` (the engine the caller sees)."""
        self.check_open()
        async with translated_errors(), self.pool.connection() as conn:
            uow = PgUnitOfWork(owner, conn)
            try:
                async with conn.transaction():
                    yield uow
            finally:
                uow.open = False

    @staticmethod
    def joined(owner: object, conn: DictConnection) -> UnitOfWork:
        """A unit of work for ``owner`` on ``conn``, a caller's connection already inside
        a transaction (the caller commits or rolls back)."""
        return PgUnitOfWork(owner, conn)

    @staticmethod
    def owned(uow: UnitOfWork, owner: object) -> DictConnection:
        """The connection of ``uow``, which must be an open unit of work of ``owner``."""
        if not isinstance(uow, PgUnitOfWork) or uow.owner is not owner:
            raise DatabaseError("the unit of work does not belong to this engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow.conn

    @asynccontextmanager
    async def kept_conn(
        self, purpose: str, prefer: Callable[[DictConnection], bool] | None = None
    ) -> AsyncIterator[DictConnection]:
        """An autocommit connection kept for one hot statement (``purpose``): the most
        recently used idle one that ``prefer`` accepts (the claim prefers one where its
        slot's statement is planned), else the most recently used idle one, a new one (up
        to ``KEPT_CONNECTIONS`` per purpose), or else a pooled one. The engine's kept
        connections plan prepared statements generically for their whole session
        (``prepare_kept``), so they serve only statements that want that (the ring-wide
        claim on the claim's is one: the server settles on its generic plan by itself). A
        kept connection whose statement failed or was cancelled is closed, not reused."""
        self.check_open()
        if purpose not in KEPT_PURPOSES:
            # MAX_KEPT_CONNECTIONS, which workers budget their connections by, counts these.
            raise ValueError(f"no connections are kept for {purpose!r}")
        kept = self.kept.get(purpose)
        if kept is None:
            kept = self.kept[purpose] = Kept()
        while not kept.idle and kept.lent is not None:
            # A warm-up holds the warm connection for a few ms; a new backend would
            # first load the catalog of every ring partition (tens of ms).
            await kept.lent.wait()
        if not kept.idle and kept.open >= KEPT_CONNECTIONS:
            async with self.pool.connection() as pooled:
                yield pooled
            return
        if kept.idle:
            accepted = [c for c in kept.idle if prefer is not None and prefer(c)]
            conn = accepted[-1] if accepted else kept.idle[-1]
            kept.idle.remove(conn)
        else:
            conn = await self._open_kept(kept)
        async with self._in_use(kept, conn):
            yield conn

    async def _open_kept(self, kept: Kept) -> DictConnection:
        """A new connection for ``kept``, prepared for its session (``prepare_kept``)."""
        kept.open += 1
        try:
            conninfo = self.pool.conninfo
            if not isinstance(conninfo, str):
                raise TypeError("the engine's pool must be opened on a connection string")
            conn = await connect(conninfo)
        except BaseException:
            kept.open -= 1
            raise
        if self._prepare_kept is not None:
            try:
                await self._prepare_kept(conn)
            except BaseException:
                await self._drop_kept(kept, conn)
                raise
        return conn

    @asynccontextmanager
    async def _in_use(self, kept: Kept, conn: DictConnection) -> AsyncIterator[None]:
        """Give ``conn`` back to ``kept``'s idle ones once the block ends, unless it
        failed, was cancelled or the connection (or the engine) closed meanwhile: then it
        is closed, not reused."""
        try:
            yield
        except BaseException:
            await self._drop_kept(kept, conn)
            raise
        if self.closed or conn.closed:
            await self._drop_kept(kept, conn)
        else:
            kept.idle.append(conn)

    async def warm_kept(
        self,
        purpose: str,
        warm: Callable[[DictConnection], Awaitable[object]],
        avoid: Callable[[DictConnection], bool] | None = None,
    ) -> bool:
        """Run ``warm`` on a connection kept for ``purpose`` that its callers do not need
        meanwhile: an idle one that ``avoid`` does not refuse (the claim's warm-up avoids
        the connection where the current slot's claim runs) while another is open for
        the callers, else a second one opened for it. When ``avoid`` refuses every idle
        one and two or more are idle, the least recently used of them: the callers keep
        another that it refuses as well (both have the current slot planned once a claim
        and a warm-up planned it side by side). Never while another warm-up runs, and
        never on the only connection (its callers would wait for the warm-up); returns
        whether it ran. A connection whose warm-up failed is closed, as in
        :meth:`kept_conn`.

        On the connection the callers are not using, a statement planned ahead (the
        claim of the slot the ring enters next) costs them nothing: borrowing theirs made
        the next claim wait 5-10 ms for it."""
        kept = self.kept.get(purpose)
        if self.closed or kept is None or kept.lent is not None:
            return False
        free = [c for c in kept.idle if avoid is None or not avoid(c)]
        if not free and len(kept.idle) >= 2:
            free = kept.idle[:1]
        conn: DictConnection | None = None
        if free and kept.open >= 2:
            conn = free[0]
            kept.idle.remove(conn)
        elif not 0 < kept.open < KEPT_CONNECTIONS:
            return False
        kept.lent = asyncio.Event()
        try:
            if conn is None:
                conn = await self._open_kept(kept)
            async with self._in_use(kept, conn):
                await warm(conn)
        finally:
            kept.lent.set()
            kept.lent = None
        return True

    async def _drop_kept(self, kept: Kept, conn: DictConnection) -> None:
        kept.open -= 1
        with anyio.CancelScope(shield=True):
            try:
                await conn.close()
            except Exception:
                log.debug("closing a kept connection failed", exc_info=True)

    async def close_kept(self) -> None:
        """Refuse new work and close the kept connections (engine shutdown)."""
        self.closed = True
        for kept in self.kept.values():
            idle, kept.idle = kept.idle, []
            for conn in idle:
                await self._drop_kept(kept, conn)
