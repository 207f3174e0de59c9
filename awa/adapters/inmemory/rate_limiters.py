"""The in-memory store's fleet-wide rate limiters, read for operator surfaces."""

from __future__ import annotations

from awa.adapters.inmemory.store import SharedStore
from awa.domain.rate_limits import LimiterState


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
