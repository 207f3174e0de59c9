"""Batch successful completions into few ``engine.complete`` calls."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from awa.domain.job import RunLease
from awa.ports.clock import Clock
from awa.ports.storage import Ack, StorageEngine
from awa.runtime import metrics
from awa.runtime.log_throttle import FailureLog
from awa.runtime.wake import Waker

log = logging.getLogger("awa.runtime.completion")


OnAck = Callable[[Ack], None]


class _Batch:
    """Completions that will be flushed together; one event wakes all their waiters and
    the callbacks of the others run right after the flush."""

    __slots__ = ("acks", "callbacks", "done", "leases")

    def __init__(self) -> None:
        self.leases: list[RunLease] = []
        self.callbacks: list[OnAck | None] = []
        self.done = anyio.Event()
        self.acks: list[Ack] = []


class Ticket:
    """A queued completion; :meth:`wait` returns its acknowledgement."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    async def wait(self) -> Ack:
        await self._batch.done.wait()
        return self._batch.acks[self._index]


class CompletionBatcher:
    """Collects completions and flushes them together.

    A flush happens when ``batch_size`` completions are waiting or ``flush_interval``
    seconds after the first one arrived. :meth:`submit` queues a completion once fewer
    than ``max_backlog`` completions are unacknowledged (so a slow database pushes back
    on the handlers) and returns a :class:`Ticket`; the attempt stays live until the
    ticket's flush is acknowledged. A failed flush is retried (with a capped backoff)
    and never dropped.
    """

    def __init__(
        self,
        engine: StorageEngine,
        *,
        clock: Clock,
        batch_size: int = 512,
        flush_interval: float = 0.001,
        retry_delay: float = 0.05,
        max_retry_delay: float = 2.0,
        max_backlog: int | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._batch_size = batch_size
        self._max_backlog = max(1, batch_size if max_backlog is None else max_backlog)
        self._unacked = 0
        self._room: anyio.Event | None = None
        self._flush_interval = flush_interval
        self._retry_delay = retry_delay
        self._max_retry_delay = max_retry_delay
        self._failures = FailureLog(log, "completion flush", clock=clock.monotonic)
        # Filling batches, oldest first; only the last one takes new completions.
        self._batches: list[_Batch] = []
        self._wake = Waker(clock)
        self.flushes = 0
        self.healthy = True

    @property
    def pending(self) -> int:
        return sum(len(batch.leases) for batch in self._batches)

    @property
    def unacknowledged(self) -> int:
        """Completions queued or being flushed, not yet acknowledged."""
        return self._unacked

    def try_submit(self, lease: RunLease, on_ack: OnAck | None = None) -> Ticket | None:
        """Queue a completion if the backlog has room (without waiting); else ``None``."""
        if self._unacked >= self._max_backlog:
            return None
        batches = self._batches
        if not batches or len(batches[-1].leases) >= self._batch_size:
            batches.append(_Batch())
        batch = batches[-1]
        index = len(batch.leases)
        batch.leases.append(lease)
        batch.callbacks.append(on_ack)
        self._unacked += 1
        self._wake.wake()
        return Ticket(batch, index)

    async def submit(self, lease: RunLease, on_ack: OnAck | None = None) -> Ticket:
        """Queue a completion, first waiting while ``max_backlog`` are unacknowledged.
        ``on_ack`` (if given) is called with the acknowledgement right after the flush,
        so the caller need not keep a task waiting on the ticket."""
        while (ticket := self.try_submit(lease, on_ack)) is None:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        return ticket

    async def complete(self, lease: RunLease) -> Ack:
        """Queue a completion and wait for its acknowledgement."""
        return await (await self.submit(lease)).wait()

    async def run(self) -> None:
        """Flush forever; cancel it only once no caller waits on :meth:`complete`."""
        while True:
            if not self._batches:
                await self._wake.wait(1.0)
                continue
            if len(self._batches[0].leases) < self._batch_size and self._flush_interval > 0:
                await self._clock.sleep(self._flush_interval)
            # Detached before flushing: completions arriving meanwhile start the next batch.
            batch = self._batches.pop(0)
            acks = await self._flush(batch.leases)
            if len(acks) != len(batch.leases):
                raise RuntimeError("the engine acknowledged a different number of completions")
            batch.acks = acks
            self._unacked -= len(batch.leases)
            batch.done.set()
            for callback, ack in zip(batch.callbacks, acks, strict=True):
                if callback is not None:
                    try:
                        callback(ack)
                    except Exception:
                        log.exception("completion callback failed")
            if self._room is not None:
                self._room.set()
                self._room = None

    async def _flush(self, leases: list[RunLease]) -> list[Ack]:
        delay = self._retry_delay
        instruments = metrics.instruments()
        while True:
            started = time.perf_counter()
            try:
                acks = await self._engine.complete(leases)
            except Exception as exc:
                self.healthy = False
                self._failures.failed(exc, f" for {len(leases)} attempts; retrying")
                await self._clock.sleep(delay)
                delay = min(delay * 2, self._max_retry_delay)
                continue
            self.healthy = True
            self._failures.succeeded()
            self.flushes += 1
            if instruments is not None:
                instruments.flushed(len(leases), time.perf_counter() - started)
            return acks
