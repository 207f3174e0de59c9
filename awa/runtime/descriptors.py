"""Descriptor catalogs at run time: each runtime keeps its declared descriptors fresh in
the catalog tables (at start and every snapshot tick) and publishes their hashes in its
runtime snapshot; the maintenance leader deletes descriptors no runtime has refreshed
within ``descriptor_retention``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta

from awa.domain.descriptors import retention_cutoff
from awa.ports.clock import Clock
from awa.ports.descriptors import DeclaredDescriptor, DescriptorStore
from awa.runtime.metrics import Key, descriptor_info

log = logging.getLogger("awa.runtime.descriptors")


class DescriptorService:
    """Keeps one runtime's declared descriptors in ``store``."""

    def __init__(
        self,
        store: DescriptorStore,
        clock: Clock,
        queues: Sequence[DeclaredDescriptor] = (),
        kinds: Sequence[DeclaredDescriptor] = (),
        *,
        sync_interval: float = 10.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.queues = tuple(queues)
        self.kinds = tuple(kinds)
        self.sync_interval = sync_interval

    @property
    def declares_any(self) -> bool:
        return bool(self.queues or self.kinds)

    def queue_hashes(self) -> dict[str, str]:
        return {d.name: d.descriptor_hash for d in self.queues}

    def kind_hashes(self) -> dict[str, str]:
        return {d.name: d.descriptor_hash for d in self.kinds}

    def info_gauges(self) -> dict[str, Callable[[], list[tuple[float, Key]]]]:
        """``awa.queue.info`` and ``awa.job_kind.info``: one point of value 1 per declared
        descriptor, reported by every runtime that declares it."""
        queues = [(1.0, descriptor_info("queue", d.name, d.descriptor)) for d in self.queues]
        kinds = [(1.0, descriptor_info("job_kind", d.name, d.descriptor)) for d in self.kinds]
        return {"awa.queue.info": lambda: queues, "awa.job_kind.info": lambda: kinds}

    async def sync(self) -> None:
        """Upsert the declared descriptors and mark them seen now."""
        if self.declares_any:
            await self.store.sync_descriptors(
                self.queues, self.kinds, sync_interval_ms=int(self.sync_interval * 1000)
            )

    async def sync_loop(self) -> None:
        """Refresh every ``sync_interval`` until cancelled; failures are logged and retried
        on the next tick (readers see the descriptor as stale meanwhile)."""
        while True:
            await self.clock.sleep(self.sync_interval)
            try:
                await self.sync()
            except Exception:
                log.warning("refreshing descriptors failed", exc_info=True)


async def clean_up_descriptors(store: DescriptorStore, clock: Clock, retention: timedelta) -> int:
    """Delete descriptors unseen for ``retention`` (zero disables the cleanup)."""
    cutoff = retention_cutoff(clock.now(), retention)
    if cutoff is None:
        return 0
    deleted = await store.delete_descriptors_unseen_since(cutoff)
    if deleted:
        log.info("deleted %d descriptors unseen for %s", deleted, retention)
    return deleted
