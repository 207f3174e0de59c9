"""Stored results in memory (the ``ResultStore`` port)."""

from __future__ import annotations

from datetime import datetime

from awa.adapters.inmemory.notifier import InMemorySubscription, NotificationHub
from awa.domain.results import (
    RESULT_RETENTION,
    StoredResult,
    announced_channels,
    completed_channel,
    result_channel,
)
from awa.ports.clock import Clock


class InMemoryResultStore:
    """Results keyed by job id; waiters are told through a hub of their own. Each call is
    one synchronous change, so it is atomic on the event loop."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._results: dict[int, StoredResult] = {}
        self._hub = NotificationHub()

    @property
    def clock(self) -> Clock:
        return self._clock

    async def store_result(self, job_id: int, json_text: str, *, kind: str | None = None) -> None:
        now = self._clock.now()
        self._results[job_id] = StoredResult(
            job_id, json_text, now, now + RESULT_RETENTION, kind=kind
        )

    async def get_result(self, job_id: int) -> StoredResult | None:
        result = self._results.get(job_id)
        if result is None or result.expires_at <= self._clock.now():
            return None
        return result

    async def announce_finished(self, job_id: int, *, completed: bool = False) -> None:
        self._hub.publish(announced_channels(job_id, completed=completed))

    async def subscribe_finished(self, job_id: int) -> InMemorySubscription:
        return await self._hub.subscribe([result_channel(job_id), completed_channel(job_id)])

    async def prune_results(self, *, before: datetime) -> int:
        old = [job_id for job_id, r in self._results.items() if r.expires_at < before]
        for job_id in old:
            del self._results[job_id]
        return len(old)
