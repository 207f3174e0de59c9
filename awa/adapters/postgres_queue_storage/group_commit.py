"""Group commit for concurrent producers of one engine (ADR 0008, ADR 0040)."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from awa.adapters.postgres_queue_storage.connections import Connections
from awa.domain.job import JobRecord, JobSpec
from awa.ports.clock import Clock

#: Most single inserts written by one statement of a batch.
BATCH_LIMIT = 256
#: The longest a single insert waits for a write already on the wire (seconds, as the
#: recent round trips predict) rather than going out alongside it. Over a local link every
#: write is back within it, so inserts that meet one on the wire are batched as before; over
#: a slow link most inserts would wait most of a round trip, and go at once instead.
WAIT_AT_MOST = 0.002
#: How many recent writes the link's round trip is taken from (their shortest: a write
#: slowed by the server's load or the host's says nothing about the link).
ROUND_TRIP_SAMPLES = 16

Write = Callable[[Sequence[JobSpec]], Awaitable[list[JobRecord]]]


class GroupCommit:
    """Single inserts that arrive while another enqueue of this engine is in flight are
    written together: every insert waiting when a batch goes is written by its one
    statement in one transaction (one WAL flush instead of one each). Each caller still
    returns only once its job is committed, and an error (a route change, a lost
    connection) reaches every caller of its batch, none of whose jobs was written.

    Several batches may be on the wire at once, up to :attr:`window` (half the engine's
    pool). A waiting insert goes in a new batch at once when none of the group's batches is
    on the wire, or when the soonest of the writes on the wire (single inserts alone and
    batches) is expected back more than :data:`WAIT_AT_MOST` from now, judged by the
    shortest recent round trip; otherwise it waits for a write to come back and goes with
    the next batch. So over a local link inserts are batched behind the one batch on the
    wire, and over a slow link an insert does not wait a round trip for a batch already
    sent.

    ``in_flight`` counts the engine's enqueues on their way to the database; the enqueue
    keeps it, and a single insert joins a batch only while it is not zero."""

    def __init__(self, connections: Connections, clock: Clock) -> None:
        self._connections = connections
        self._clock = clock
        self.in_flight = 0
        self.pending: list[tuple[JobSpec, asyncio.Future[JobRecord]]] = []
        #: When each single insert or batch on the wire went (monotonic), by write.
        self._wire: dict[int, float] = {}
        self._batches: set[asyncio.Task[Any]] = set()
        self._round_trips: deque[float] = deque(maxlen=ROUND_TRIP_SAMPLES)
        self._writes = itertools.count()
        self._dispatch_soon = False

    @property
    def window(self) -> int:
        """The most batches on the wire at once: half the pool, the rest left to the
        engine's other work."""
        return max(1, self._connections.pool.max_size // 2)

    @property
    def batches(self) -> int:
        """Batches on the wire now."""
        return len(self._batches)

    def round_trip(self) -> float | None:
        """The link's round trip as this engine's writes see it: the shortest of the recent
        ones (seconds), or None before the first came back."""
        return min(self._round_trips) if self._round_trips else None

    def slow_link(self) -> bool:
        """Whether writes are expected to take longer than an insert waits for one; then
        they go alongside each other (and each notifies in its own statement)."""
        round_trip = self.round_trip()
        return round_trip is not None and round_trip > WAIT_AT_MOST

    async def alone(self, spec: JobSpec, write: Write) -> JobRecord:
        """Write ``spec`` at once by itself (nothing of this engine is in flight), on the
        wire for the inserts that arrive meanwhile."""
        self._connections.check_open()
        try:
            (record,) = await self._timed(write, [spec])
        finally:
            self._dispatch(write, returned=True)
        return record

    async def join(self, spec: JobSpec, write: Write) -> JobRecord:
        """Have ``spec`` written by the next batch (``write`` writes one)."""
        self._connections.check_open()
        future: asyncio.Future[JobRecord] = asyncio.get_running_loop().create_future()
        self.pending.append((spec, future))
        if not self._dispatch_soon:
            # Soon, not now: the inserts that arrive in the same turn of the loop share it.
            self._dispatch_soon = True
            asyncio.get_running_loop().call_soon(self._dispatch, write)
        return await future

    def _may_send(self, returned: bool) -> bool:
        """Whether a batch goes now; ``returned``: a write just came back."""
        if not self._batches:
            return True
        if len(self._batches) >= self.window:
            return False
        if returned:
            return True
        round_trip = self.round_trip()
        if round_trip is None or not self._wire:
            return False
        soonest_back = min(self._wire.values()) + round_trip
        return soonest_back - self._clock.monotonic() > WAIT_AT_MOST

    def _dispatch(self, write: Write, *, returned: bool = False) -> None:
        """Send what waits, in as many batches as the rule allows now (``returned``: a
        write just came back, so the first batch goes if the window has room)."""
        self._dispatch_soon = False
        while self.pending and self._may_send(returned):
            returned = False
            taken, self.pending = self.pending[:BATCH_LIMIT], self.pending[BATCH_LIMIT:]
            # A caller cancelled before its batch went out gave up on its job: not written.
            taken = [(spec, future) for spec, future in taken if not future.done()]
            if taken:
                task = asyncio.get_running_loop().create_task(self._send(taken, write))
                self._batches.add(task)

    async def _timed(self, write: Write, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """Run ``write`` on the wire; the round trip of one that succeeds counts."""
        key = next(self._writes)
        sent = self._wire[key] = self._clock.monotonic()
        try:
            records = await write(specs)
        finally:
            del self._wire[key]
        self._round_trips.append(self._clock.monotonic() - sent)
        return records

    async def _send(
        self, taken: list[tuple[JobSpec, asyncio.Future[JobRecord]]], write: Write
    ) -> None:
        try:
            records = await self._timed(write, [spec for spec, _ in taken])
        except Exception as exc:
            for _, future in taken:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            for _, future in taken:
                future.cancel()
            raise
        finally:
            self._batches.discard(asyncio.current_task())
            self._dispatch(write, returned=True)
        for (_, future), record in zip(taken, records, strict=True):
            if not future.done():
                future.set_result(record)

    async def settle(self) -> None:
        """Let the batches on the wire, and those still waiting to go, finish (engine
        shutdown)."""
        while True:
            await asyncio.sleep(0)  # a dispatch called soon by a join runs first
            if not self._batches:
                return
            await asyncio.wait(set(self._batches))
