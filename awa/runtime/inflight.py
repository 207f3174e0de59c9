"""The set of attempts this runtime is executing, shared with the heartbeat thread."""

from __future__ import annotations

import threading

from awa.domain.job import RunLease
from awa.runtime.context import AttemptContext


class InFlight:
    """Thread-safe registry of live attempts keyed by run lease."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[RunLease, AttemptContext] = {}

    def add(self, context: AttemptContext) -> None:
        with self._lock:
            self._attempts[context.lease] = context

    def remove(self, context: AttemptContext) -> None:
        with self._lock:
            if self._attempts.get(context.lease) is context:
                del self._attempts[context.lease]

    def get(self, lease: RunLease) -> AttemptContext | None:
        with self._lock:
            return self._attempts.get(lease)

    def snapshot(self) -> list[AttemptContext]:
        with self._lock:
            return list(self._attempts.values())

    def cancel(self, lease: RunLease) -> bool:
        """Flip the cancel flag of a local attempt; returns whether it was local."""
        context = self.get(lease)
        if context is None:
            return False
        context.request_cancel()
        return True

    def count(self, queue: str | None = None) -> int:
        with self._lock:
            if queue is None:
                return len(self._attempts)
            return sum(1 for c in self._attempts.values() if c.queue == queue)

    def __len__(self) -> int:
        return self.count()
