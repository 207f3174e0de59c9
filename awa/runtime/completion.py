"""Batch successful completions into few ``engine.complete`` calls."""

from __future__ import annotations

import logging

import anyio

from awa.domain.job import RunLease
from awa.ports.storage import Ack, StorageEngine
from awa.runtime.wake import Waker

log = logging.getLogger("awa.runtime.completion")


class _Batch:
    """Completions that will be flushed together; one event wakes all their callers."""

    __slots__ = ("acks", "done", "leases")

    def __init__(self) -> None:
        self.leases: list[RunLease] = []
        self.done = anyio.Event()
        self.acks: list[Ack] = []


class CompletionBatcher:
    """Collects completions and flushes them together.

    A flush happens when ``batch_size`` completions are waiting or ``flush_interval``
    seconds after the first one arrived. :meth:`complete` returns only once the flush
    carrying its lease was acknowledged, so callers can free the handler's permit then.
    A failed flush is retried (with a capped backoff) and never dropped.
    """

    def __init__(
        self,
        engine: StorageEngine,
        *,
        batch_size: int = 512,
        flush_interval: float = 0.001,
        retry_delay: float = 0.05,
        max_retry_delay: float = 2.0,
    ) -> None:
        self._engine = engine
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._retry_delay = retry_delay
        self._max_retry_delay = max_retry_delay
        # Filling batches, oldest first; only the last one takes new completions.
        self._batches: list[_Batch] = []
        self._wake = Waker()
        self.flushes = 0
        self.healthy = True

    @property
    def pending(self) -> int:
        return sum(len(batch.leases) for batch in self._batches)

    async def complete(self, lease: RunLease) -> Ack:
        """Queue a completion and wait for its acknowledgement."""
        batches = self._batches
        if not batches or len(batches[-1].leases) >= self._batch_size:
            batches.append(_Batch())
        batch = batches[-1]
        index = len(batch.leases)
        batch.leases.append(lease)
        self._wake.wake()
        await batch.done.wait()
        return batch.acks[index]

    async def run(self) -> None:
        """Flush forever; cancel it only once no caller waits on :meth:`complete`."""
        while True:
            if not self._batches:
                await self._wake.wait(1.0)
                continue
            if len(self._batches[0].leases) < self._batch_size and self._flush_interval > 0:
                await anyio.sleep(self._flush_interval)
            # Detached before flushing: completions arriving meanwhile start the next batch.
            batch = self._batches.pop(0)
            acks = await self._flush(batch.leases)
            if len(acks) != len(batch.leases):
                raise RuntimeError("the engine acknowledged a different number of completions")
            batch.acks = acks
            batch.done.set()

    async def _flush(self, leases: list[RunLease]) -> list[Ack]:
        delay = self._retry_delay
        while True:
            try:
                acks = await self._engine.complete(leases)
            except Exception:
                self.healthy = False
                log.warning(
                    "completion flush of %d attempts failed; retrying", len(leases), exc_info=True
                )
                await anyio.sleep(delay)
                delay = min(delay * 2, self._max_retry_delay)
                continue
            self.healthy = True
            self.flushes += 1
            return acks
