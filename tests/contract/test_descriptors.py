"""The descriptor store (:class:`awa.ports.descriptors.DescriptorStore`), once per
backend (the fixtures of ``test_cron``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.descriptors import Descriptor
from awa.ports.descriptors import DeclaredDescriptor, DescriptorStore
from tests.contract.test_cron import Cron, cron

pytestmark = pytest.mark.anyio

__all__ = ["cron"]


def _store(cron: Cron) -> DescriptorStore:
    return cron.control.descriptors


async def _clean(store: DescriptorStore, cron: Cron) -> None:
    await store.delete_descriptors_unseen_since(cron.clock.now() + timedelta(days=365 * 100))


EMAIL = Descriptor(
    display_name="Email", description="outbound", owner="ops", docs_url="https://x",
    tags=("mail",), extra={"tier": 1},
)  # fmt: skip


async def test_sync_stores_both_catalogs_and_refreshes_last_seen(cron: Cron) -> None:
    store = _store(cron)
    await _clean(store, cron)
    await store.sync_descriptors(
        [DeclaredDescriptor("email", EMAIL, "h1")],
        [DeclaredDescriptor("send", Descriptor(display_name="Send"), "k1")],
        sync_interval_ms=10_000,
    )
    (queue,) = await store.list_descriptors("queue")
    assert (queue.name, queue.descriptor, queue.descriptor_hash) == ("email", EMAIL, "h1")
    assert queue.sync_interval_ms == 10_000
    (kind,) = await store.list_descriptors("job_kind")
    assert kind.name == "send" and kind.descriptor.display_name == "Send"
    first_seen = queue.last_seen_at
    cron.clock.advance(5)
    await store.sync_descriptors(
        [DeclaredDescriptor("email", EMAIL, "h1")], [], sync_interval_ms=10_000
    )
    (again,) = await store.list_descriptors("queue")
    assert again.last_seen_at > first_seen and again.updated_at == queue.updated_at
    cron.clock.advance(5)
    changed = Descriptor(display_name="Mail")
    await store.sync_descriptors(
        [DeclaredDescriptor("email", changed, "h2")], [], sync_interval_ms=5_000
    )
    (updated,) = await store.list_descriptors("queue")
    assert updated.descriptor == changed and updated.descriptor_hash == "h2"
    assert updated.updated_at > queue.updated_at and updated.created_at == queue.created_at
    assert updated.sync_interval_ms == 5_000
    assert [k.name for k in await store.list_descriptors("job_kind")] == ["send"]


async def test_unseen_descriptors_are_deleted_by_cutoff(cron: Cron) -> None:
    store = _store(cron)
    await _clean(store, cron)
    await store.sync_descriptors(
        [DeclaredDescriptor("old", Descriptor(), "a")],
        [DeclaredDescriptor("old_kind", Descriptor(), "b")],
        sync_interval_ms=10_000,
    )
    cron.clock.advance(timedelta(days=2))
    await store.sync_descriptors(
        [DeclaredDescriptor("fresh", Descriptor(), "c")], [], sync_interval_ms=10_000
    )
    cutoff = cron.clock.now() - timedelta(days=1)
    assert await store.delete_descriptors_unseen_since(cutoff) == 2
    assert [d.name for d in await store.list_descriptors("queue")] == ["fresh"]
    assert await store.list_descriptors("job_kind") == []
    assert await store.delete_descriptors_unseen_since(cutoff) == 0
