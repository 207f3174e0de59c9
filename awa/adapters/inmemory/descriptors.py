"""Descriptor catalogs in memory (the ``DescriptorStore`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import attrs

from awa.domain.descriptors import Catalog, StoredDescriptor
from awa.ports.clock import Clock
from awa.ports.descriptors import DeclaredDescriptor


class InMemoryDescriptorStore:
    """Both catalogs, keyed by queue or kind name. Each call is one synchronous change,
    so it is atomic on the event loop."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._descriptors: dict[Catalog, dict[str, StoredDescriptor]] = {
            "queue": {},
            "job_kind": {},
        }

    async def sync_descriptors(
        self,
        queues: Sequence[DeclaredDescriptor],
        kinds: Sequence[DeclaredDescriptor],
        *,
        sync_interval_ms: int,
    ) -> None:
        now = self._clock.now()
        for catalog, declared in (("queue", queues), ("job_kind", kinds)):
            table = self._descriptors[catalog]  # type: ignore[index]
            for item in declared:
                old = table.get(item.name)
                changed = old is None or old.descriptor_hash != item.descriptor_hash
                table[item.name] = StoredDescriptor(
                    name=item.name,
                    descriptor=item.descriptor,
                    descriptor_hash=item.descriptor_hash,
                    sync_interval_ms=sync_interval_ms,
                    created_at=now if old is None else old.created_at,
                    updated_at=now if changed or old is None else old.updated_at,
                    last_seen_at=now,
                )

    async def list_descriptors(self, catalog: Catalog) -> list[StoredDescriptor]:
        table = self._descriptors[catalog]
        return [attrs.evolve(table[name]) for name in sorted(table)]

    async def delete_descriptors_unseen_since(self, cutoff: datetime) -> int:
        deleted = 0
        for table in self._descriptors.values():
            for name in [n for n, d in table.items() if d.last_seen_at < cutoff]:
                del table[name]
                deleted += 1
        return deleted
