"""``awa.queue.depth``, ``awa.queue.lag`` and ``awa.job.dlq_depth``, read by the maintenance
leader on an interval (one cheap read per cluster rather than one per worker).

Depth and lag come from ``queue_counts()``, which on queue storage reads the folded
per-lane counters and each lane's claim window, never scanning job rows. Only the leader
reports them, so summing over workers does not count a queue twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from awa.domain.states import JobState
from awa.ports.storage import StorageEngine
from awa.runtime.metrics import ATTR_QUEUE, ATTR_STATE, Instruments, Key

#: How often the leader refreshes the queue gauges.
REFRESH_INTERVAL = 30.0
#: Reported values older than this are dropped (the leader stopped refreshing them).
_STALE_AFTER = 3 * REFRESH_INTERVAL
_DEPTH_STATES = (
    JobState.Available,
    JobState.Scheduled,
    JobState.Retryable,
    JobState.Running,
    JobState.WaitingExternal,
)


class QueueGauges:
    """The latest queue readings, reported to ``instruments`` when a reader collects."""

    def __init__(self, engine: StorageEngine, instruments: Instruments) -> None:
        self._engine = engine
        self._instruments = instruments
        self._depth: list[tuple[float, Key]] = []
        self._lag: list[tuple[float, Key]] = []
        self._dlq: list[tuple[float, Key]] = []
        self._read_at = 0.0
        self._removers: list[Callable[[], None]] = []

    def attach(self) -> None:
        """Start reporting (while the maintenance loop runs)."""
        if self._removers:
            return
        add = self._instruments.add_gauge_source
        self._removers = [
            add("awa.queue.depth", lambda: self._fresh(self._depth)),
            add("awa.queue.lag", lambda: self._fresh(self._lag)),
            add("awa.job.dlq_depth", lambda: self._fresh(self._dlq)),
        ]

    def detach(self) -> None:
        removers, self._removers = self._removers, []
        for remove in removers:
            remove()

    async def refresh(self) -> None:
        counts = await self._engine.queue_counts()
        dlq = await self._engine.dlq_depth_by_queue()
        now = datetime.now(UTC)
        depth: list[tuple[float, Key]] = []
        lag: list[tuple[float, Key]] = []
        for queue in counts:
            for state in _DEPTH_STATES:
                key: Key = ((ATTR_QUEUE, queue.queue), (ATTR_STATE, state.name.lower()))
                depth.append((float(queue.count(state)), key))
            oldest = queue.oldest_available_at
            waited = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
            lag.append((waited, ((ATTR_QUEUE, queue.queue),)))
        self._depth, self._lag = depth, lag
        self._dlq = [(float(n), ((ATTR_QUEUE, q),)) for q, n in dlq]
        self._read_at = time.monotonic()

    def _fresh(self, values: list[tuple[float, Key]]) -> list[tuple[float, Key]]:
        if time.monotonic() - self._read_at > _STALE_AFTER:
            return []
        return values
