"""The queue samples the maintenance leader records for the admin charts
(``awa.ports.samples.QueueSampleStore``), once per backend (the store is the backend's)."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from awa.domain.admin_views import QueueSample
from awa.domain.states import JobState
from awa.ports.samples import QueueSampleStore
from tests.contract.conftest import BackendHandle

pytestmark = pytest.mark.anyio


async def test_queue_samples_are_recorded_replaced_listed_and_pruned(
    backend: BackendHandle,
) -> None:
    store: QueueSampleStore = backend.control.queue_samples
    now = backend.clock.now()
    # The samples table outlives reset(): start from none.
    await store.prune_queue_samples(before=now + timedelta(days=3650))
    earlier, later = now - timedelta(minutes=2), now - timedelta(minutes=1)
    mail = QueueSample(earlier, "mail", {JobState.Available: 3, JobState.Running: 1}, 12.5)
    alpha = QueueSample(earlier, "alpha", {JobState.Scheduled: 2}, 0.0)
    again = QueueSample(later, "mail", {JobState.Available: 1}, 0.25)
    await store.record_queue_samples([mail, alpha, again])
    await store.record_queue_samples([])
    found = await store.queue_samples(since=earlier)
    assert [(s.sampled_at, s.queue) for s in found] == [
        (earlier, "alpha"),
        (earlier, "mail"),
        (later, "mail"),
    ]
    first = found[1]
    assert [first.count(state) for state in JobState] == [mail.count(s) for s in JobState]
    assert first.lag_seconds == 12.5 and found[0].count(JobState.Scheduled) == 2
    # A second sample of a queue at the same instant replaces the first.
    await store.record_queue_samples(
        [attrs.evolve(again, counts={JobState.Available: 5}, lag_seconds=1.0)]
    )
    (replaced,) = await store.queue_samples(since=later)
    assert (replaced.count(JobState.Available), replaced.lag_seconds) == (5, 1.0)
    assert await store.prune_queue_samples(before=later) == 2
    left = await store.queue_samples(since=now - timedelta(days=1))
    assert [(s.sampled_at, s.queue) for s in left] == [(later, "mail")]
