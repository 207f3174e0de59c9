"""Transactions of an in-memory store that several engines' units of work join
(:class:`~awa.ports.transactions.SharedTransactions` for routing(inmemory, inmemory))."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from awa.domain.errors import DatabaseError
from awa.domain.job import JobRecord, JobSpec

Commit = Callable[["InMemoryUnitOfWork"], Awaitable[None]]


class InMemoryUnitOfWork:
    """Enqueues buffered until commit. Ids are assigned at enqueue, as a sequence would."""

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.pending: list[JobRecord] = []
        #: The spec of each pending job inserted with ``depends_on`` (its edges are
        #: stored at commit).
        self.parents: dict[int, JobSpec] = {}
        self.open = True


class InMemoryTransaction:
    """One transaction of a store: each engine that joins it gets one unit of work, and
    commit applies them in the order they joined."""

    def __init__(self) -> None:
        self.open = True
        self._joined: list[tuple[InMemoryUnitOfWork, Commit]] = []

    def unit_of_work(self, owner: object, commit: Commit) -> InMemoryUnitOfWork:
        """``owner``'s unit of work in this transaction (the same one on every call);
        ``commit`` applies it when the transaction commits."""
        if not self.open:
            raise DatabaseError("the transaction is already closed")
        for uow, _ in self._joined:
            if uow.owner is owner:
                return uow
        uow = InMemoryUnitOfWork(owner)
        self._joined.append((uow, commit))
        return uow

    def mark(self) -> dict[int, int]:
        """How much each unit of work holds now (a savepoint)."""
        return {id(uow): len(uow.pending) for uow, _ in self._joined}

    def rollback_to(self, mark: dict[int, int]) -> None:
        """Forget what was buffered since ``mark``."""
        for uow, _ in self._joined:
            del uow.pending[mark.get(id(uow), 0) :]

    async def commit(self) -> None:
        self.open = False
        for uow, commit in self._joined:
            uow.open = False
            await commit(uow)

    def discard(self) -> None:
        self.open = False
        for uow, _ in self._joined:
            uow.open = False
            uow.pending.clear()


class InMemoryTransactions:
    """:class:`~awa.ports.transactions.SharedTransactions` of an in-memory store."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[InMemoryTransaction]:
        tx = InMemoryTransaction()
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        await tx.commit()

    @asynccontextmanager
    async def savepoint(self, conn: InMemoryTransaction) -> AsyncIterator[None]:
        mark = conn.mark()
        try:
            yield
        except BaseException:
            conn.rollback_to(mark)
            raise
