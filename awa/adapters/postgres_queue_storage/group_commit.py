"""Group commit for concurrent producers of one engine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from awa.adapters.postgres_queue_storage.connections import Connections, settled
from awa.domain.job import JobRecord, JobSpec

#: Most single inserts written by one statement of a batch.
BATCH_LIMIT = 256

Write = Callable[[Sequence[JobSpec]], Awaitable[list[JobRecord]]]


class GroupCommit:
    """Single inserts that arrive while another enqueue of this engine is in flight wait
    for the batch that goes next, and every insert that arrived meanwhile is written by
    one statement in one transaction (one WAL flush instead of one each). Each caller still
    returns only once its job is committed, and an error (a route change, a lost
    connection) reaches every caller of the batch, none of whose jobs was written.

    ``in_flight`` counts the engine's enqueues on their way to the database; the enqueue
    keeps it, and a single insert joins a batch only while it is not zero."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self.in_flight = 0
        self.pending: list[tuple[JobSpec, asyncio.Future[JobRecord]]] = []
        self._task: asyncio.Task[None] | None = None

    async def join(self, spec: JobSpec, write: Write) -> JobRecord:
        """Have ``spec`` written by the next batch (``write`` writes one)."""
        self._connections.check_open()
        future: asyncio.Future[JobRecord] = asyncio.get_running_loop().create_future()
        self.pending.append((spec, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send(write))
        return await future

    async def _send(self, write: Write) -> None:
        while self.pending:
            taken, self.pending = self.pending[:BATCH_LIMIT], self.pending[BATCH_LIMIT:]
            # A caller cancelled before its batch went out gave up on its job: not written.
            taken = [(spec, future) for spec, future in taken if not future.done()]
            if not taken:
                continue
            try:
                records = await write([spec for spec, _ in taken])
            except Exception as exc:
                for _, future in taken:
                    if not future.done():
                        future.set_exception(exc)
                continue
            except BaseException:
                for _, future in taken:
                    future.cancel()
                raise
            for (_, future), record in zip(taken, records, strict=True):
                if not future.done():
                    future.set_result(record)

    async def settle(self) -> None:
        """Let the batch in flight finish (engine shutdown)."""
        await settled(self._task)
