"""The live-override store (:class:`awa.ports.overrides.QueueOverrideStore`), once per
backend (the fixtures of ``test_cron``); an engine's ``reset`` clears it with the other
queue settings."""

from __future__ import annotations

import pytest

from awa.domain.errors import ValidationError
from awa.domain.overrides import QueueOverrides
from awa.ports.overrides import QueueOverrideStore
from tests.contract.test_cron import Cron, cron

pytestmark = pytest.mark.anyio

__all__ = ["cron"]

QUEUE = "overridden"


def _store(cron: Cron) -> QueueOverrideStore:
    return cron.control.overrides


async def test_set_replaces_the_whole_state_and_clear_removes_it(cron: Cron) -> None:
    store = _store(cron)
    assert await store.get_queue_overrides(QUEUE) is None
    first = QueueOverrides(poll_interval_ms=50, claim_batch_size=64, rate_limit_per_second=2.5)
    await store.set_queue_overrides(QUEUE, first)
    assert await store.get_queue_overrides(QUEUE) == first
    second = QueueOverrides(deadline_ms=30_000, rate_limit_burst=5)
    await store.set_queue_overrides(QUEUE, second)
    assert await store.get_queue_overrides(QUEUE) == second
    assert await store.list_queue_overrides() == {QUEUE: second}
    assert await store.clear_queue_overrides(QUEUE)
    assert not await store.clear_queue_overrides(QUEUE)
    assert await store.get_queue_overrides(QUEUE) is None
    assert await store.list_queue_overrides() == {}


async def test_overrides_keep_the_pause_and_bad_values_change_nothing(cron: Cron) -> None:
    store = _store(cron)
    await cron.engine.pause_queue(QUEUE, paused_by="ops")
    await store.set_queue_overrides(QUEUE, QueueOverrides(claim_batch_size=8))
    (counts,) = [c for c in await cron.engine.queue_counts() if c.queue == QUEUE]
    assert counts.paused
    with pytest.raises(ValidationError):
        await store.set_queue_overrides(QUEUE, QueueOverrides(claim_batch_size=0))
    assert await store.get_queue_overrides(QUEUE) == QueueOverrides(claim_batch_size=8)
    await cron.engine.reset()
    assert await store.get_queue_overrides(QUEUE) is None
