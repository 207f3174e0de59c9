"""Wake-ups sent after commit, coalesced per engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from awa.adapters.postgres_queue_storage.connections import Connections, settled
from awa.adapters.postgres_queue_storage.statements import Statements, run

log = logging.getLogger("awa.adapters.postgres_queue_storage")


class WakeCoalescer:
    """Notify channels after an enqueue committed, outside its transaction.

    A transaction that notifies holds one database-wide lock through its commit, so
    producers that notify in their own transaction commit one at a time (no group commit).
    Wake-ups are sent instead by one task per engine, coalesced while one is in flight, in
    a transaction of their own without a durable commit. Best effort, like every wake-up:
    workers also poll."""

    def __init__(self, connections: Connections, statements: Statements) -> None:
        self._connections = connections
        self._sql = statements
        self.pending: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def after_commit(self, channels: Iterable[str]) -> None:
        """Send ``channels`` soon, together with any others pending."""
        self.pending.update(channels)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self.pending and not self._connections.closed:
            channels = sorted(self.pending)
            self.pending.clear()
            try:
                async with self._connections.pool.connection() as conn:
                    await run(conn, self._sql["wake_quietly"], {"channels": channels}, prepare=True)
            except Exception:
                log.debug("wake-up notification failed", exc_info=True)

    async def drain(self) -> None:
        """Let a wake-up in flight finish (engine shutdown)."""
        task, self._task = self._task, None
        await settled(task)
