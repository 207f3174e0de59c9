"""Queue samples in memory (the ``QueueSampleStore`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from awa.domain.admin_views import QueueSample


class InMemoryQueueSampleStore:
    """Samples keyed by instant and queue. Each call is one synchronous change, so it is
    atomic on the event loop."""

    def __init__(self) -> None:
        self._samples: dict[tuple[datetime, str], QueueSample] = {}

    async def record_queue_samples(self, samples: Sequence[QueueSample]) -> None:
        for sample in samples:
            self._samples[(sample.sampled_at, sample.queue)] = sample

    async def queue_samples(self, *, since: datetime) -> list[QueueSample]:
        return [self._samples[key] for key in sorted(self._samples) if key[0] >= since]

    async def prune_queue_samples(self, *, before: datetime) -> int:
        old = [key for key in self._samples if key[0] < before]
        for key in old:
            del self._samples[key]
        return len(old)
