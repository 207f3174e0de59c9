"""Transactions of the store several engines share, and units of work on them.

The engines the routing engine composes live in one store (one database): a producer's
transaction reads where new jobs go and writes them in the same transaction, whichever
engine that is. :class:`SharedTransactions` opens such transactions; an engine that is a
:class:`TransactionJoiner` writes into one through a unit of work. ``C`` is the store's
transaction handle (a connection on Postgres); the ports never look inside it.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

from awa.ports.storage import UnitOfWork

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


class TransactionJoiner(Protocol[C_contra]):
    """An engine that can write into a transaction someone else opened."""

    def unit_of_work_for(self, conn: C_contra) -> UnitOfWork:
        """A unit of work on ``conn``, a transaction its caller opened and will commit or
        roll back. Enqueues through it become visible (and wake listeners) only when that
        transaction commits; on rollback they never existed. Joining the same transaction
        twice is allowed: every unit of work writes to the one transaction."""
        ...


class SharedTransactions(Protocol[C]):
    """Transactions of the store the composed engines live in."""

    def transaction(self) -> AbstractAsyncContextManager[C]:
        """A new transaction: committed when the block exits normally, rolled back when
        it raises."""
        ...

    def savepoint(self, conn: C) -> AbstractAsyncContextManager[None]:
        """A nested step of the open transaction ``conn``: when the block raises,
        everything written inside it is undone, the error propagates and ``conn`` stays
        usable; otherwise its writes join ``conn``."""
        ...
