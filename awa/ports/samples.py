"""Queue samples: each queue's depth and lag over time, as the maintenance leader records
them once a minute (``awa.queue_samples`` on Postgres), for the admin dashboard's charts.

One store per backend, in its control plane (:mod:`awa.ports.control_plane`);
``tests/contract/test_queue_samples.py`` is the
executable form of these docstrings. What a sample holds is
:class:`awa.domain.admin_views.QueueSample`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from awa.domain.admin_views import QueueSample


@runtime_checkable
class QueueSampleStore(Protocol):
    async def record_queue_samples(self, samples: Sequence[QueueSample]) -> None:
        """Store ``samples``. A sample of a queue at an instant already stored replaces
        it (a leader that retries a minute writes it once). Idempotent."""
        ...

    async def queue_samples(self, *, since: datetime) -> list[QueueSample]:
        """Every sample taken at or after ``since``, ordered by ``sampled_at`` then
        queue name."""
        ...

    async def prune_queue_samples(self, *, before: datetime) -> int:
        """Delete the samples taken before ``before``; how many were deleted."""
        ...
