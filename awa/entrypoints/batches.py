"""``awa.Batch``: jobs inserted together with a callback job that runs once, after every
one of them finished, and reads how they ended (``job.batch``; ADR 0035).

The callback waits on every job of the batch with the ``run`` policy (ADR 0032), so a
job that fails or is cancelled counts as finished instead of holding the callback back.
Everything is inserted in one transaction: the caller's, or one of its own when given a
client.
"""

from __future__ import annotations

from typing import Any, Unpack

import attrs

from awa.domain import batches
from awa.domain.batches import BatchCounts
from awa.domain.dependencies import check_spec
from awa.domain.job import JobSpec
from awa.domain.keywords import check_keywords
from awa.entrypoints.args import build_spec
from awa.entrypoints.client_sync import BlockingClientBase
from awa.entrypoints.insert_options import InsertOptions
from awa.entrypoints.job import Job
from awa.entrypoints.transaction import SyncTransaction, Transaction

__all__ = ["Batch", "BatchCounts", "InsertedBatch"]


@attrs.frozen
class InsertedBatch:
    """What :meth:`Batch.insert` wrote: the callback job (its id is the batch's) and the
    batch's jobs, in the order they were added."""

    callback: Job[Any]
    jobs: list[Job[Any]]

    @property
    def id(self) -> int:
        """The batch's id: its callback job's."""
        return self.callback.id


class Batch:
    """Jobs with a completion callback, inserted atomically::

    batch = awa.Batch(callback=Report(day="2026-12-06"), queue="reports")
    for page in pages:
        batch.add(Fetch(page))
    inserted = await batch.insert(client)   # or batch.insert(tx) inside your transaction

    The callback (``callback`` with the insert ``options``) runs once, when every job
    added has completed, failed for good or been cancelled; its handler reads the counts
    as ``job.batch``. A batch holds 1 to :data:`~awa.domain.batches.MAX_BATCH_SIZE`
    jobs."""

    def __init__(self, callback: Any, **options: Unpack[InsertOptions]) -> None:
        check_keywords("Batch", options, InsertOptions)
        spec = build_spec(callback, **options)
        check_spec(attrs.evolve(spec, depends_on=(0,)))
        self._callback = spec
        self._jobs: list[JobSpec] = []

    def add(self, args: Any, **options: Unpack[InsertOptions]) -> int:
        """Add the job ``args`` with the insert ``options`` (``kind``, ``queue``, ...),
        checked here; answers its position in the batch. Refuses a job beyond the size
        cap."""
        check_keywords("Batch.add", options, InsertOptions)
        spec = build_spec(args, **options)
        batches.check_size(len(self._jobs) + 1)
        self._jobs.append(spec)
        return len(self._jobs) - 1

    def __len__(self) -> int:
        return len(self._jobs)

    async def insert(self, target: Any) -> InsertedBatch:
        """Insert the batch's jobs, then its callback, in one transaction: ``target`` is an
        :class:`~awa.AsyncClient` (a transaction of its own, committed at the end) or a
        :class:`~awa.Transaction` (the caller's, which commits or rolls back with them).
        An empty batch raises ``ValidationError`` before anything is written."""
        batches.check_size(len(self._jobs))
        if isinstance(target, Transaction):
            return await self._insert_in(target)
        if isinstance(target, SyncTransaction | BlockingClientBase) or not hasattr(
            target, "transaction"
        ):
            raise TypeError(
                f"Batch.insert takes an AsyncClient or a Transaction, got {type(target).__name__}"
            )
        async with await target.transaction() as tx:
            return await self._insert_in(tx)

    async def _insert_in(self, tx: Transaction) -> InsertedBatch:
        jobs = await tx._insert_specs(list(self._jobs))
        (callback,) = await tx._insert_specs(
            [batches.callback_spec(self._callback, [job.id for job in jobs])]
        )
        return InsertedBatch(callback, jobs)

    def insert_sync(self, target: Any) -> InsertedBatch:
        """Blocking twin of :meth:`insert`: ``target`` is a :class:`~awa.Client` or a
        :class:`~awa.SyncTransaction`."""
        batches.check_size(len(self._jobs))
        if isinstance(target, SyncTransaction):
            return self._insert_in_sync(target)
        if not isinstance(target, BlockingClientBase):
            raise TypeError(
                "Batch.insert_sync takes a Client or a SyncTransaction, "
                f"got {type(target).__name__}"
            )
        with target.transaction() as tx:
            inserted = self._insert_in_sync(tx)
        return inserted

    def _insert_in_sync(self, tx: SyncTransaction) -> InsertedBatch:
        jobs = tx._insert_specs(list(self._jobs))
        (callback,) = tx._insert_specs(
            [batches.callback_spec(self._callback, [job.id for job in jobs])]
        )
        return InsertedBatch(callback, jobs)
