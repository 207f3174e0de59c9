"""The in-memory store's fleet-wide rate limiters, read for operator surfaces."""

from __future__ import annotations

from datetime import datetime

from awa.adapters.inmemory.store import SharedStore
from awa.domain.rate_limits import LimiterState, idle


class InMemoryRateLimiterReader:
    """:class:`~awa.ports.rate_limiters.RateLimiterReader` over a shared store."""

    def __init__(self, store: SharedStore) -> None:
        self._store = store

    async def limiter_states(self) -> list[LimiterState]:
        limiters = self._store.state.rate_limiters
        return [
            LimiterState(queue=queue, limiter=name, tat=tat, limit=limit)
            for (queue, name), (tat, limit) in sorted(limiters.items())
        ]

    async def prune_idle_limiters(self, *, now: datetime, limit: int) -> int:
        store = self._store
        async with store.lock:
            limiters = store.state.rate_limiters
            names = [name for name, (tat, _) in sorted(limiters.items()) if idle(tat, now)]
            names = names[:limit]
            if names:
                # The committed state is never changed in place: commit a copy, as a
                # write does.
                copy = store.state.copy()
                for name in names:
                    del copy.rate_limiters[name]
                store.state = copy
        return len(names)
