"""Queue samples of the in-memory engine (the ``QueueSampleStore`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from awa.adapters.inmemory.base import EngineBase
from awa.domain.admin_views import QueueSample
from awa.ports.clock import Clock


class SampleOps(EngineBase):
    """Samples keyed by instant and queue."""

    def __init__(self, clock: Clock, *args: Any, **kwargs: Any) -> None:
        super().__init__(clock, *args, **kwargs)
        self._samples: dict[tuple[datetime, str], QueueSample] = {}

    async def record_queue_samples(self, samples: Sequence[QueueSample]) -> None:
        async with self._write():
            for sample in samples:
                self._samples[(sample.sampled_at, sample.queue)] = sample

    async def queue_samples(self, *, since: datetime) -> list[QueueSample]:
        self._read()
        return [self._samples[key] for key in sorted(self._samples) if key[0] >= since]

    async def prune_queue_samples(self, *, before: datetime) -> int:
        async with self._write():
            old = [key for key in self._samples if key[0] < before]
            for key in old:
                del self._samples[key]
        return len(old)
