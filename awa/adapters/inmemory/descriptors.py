"""Descriptor catalogs of the in-memory engine (the ``DescriptorStore`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from awa.adapters.inmemory.base import EngineBase
from awa.domain.descriptors import Catalog, StoredDescriptor
from awa.ports.clock import Clock
from awa.ports.descriptors import DeclaredDescriptor


class DescriptorOps(EngineBase):
    """Both catalogs, keyed by queue or kind name."""

    def __init__(self, clock: Clock, *args: Any, **kwargs: Any) -> None:
        super().__init__(clock, *args, **kwargs)
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
        async with self._write() as write:
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
                        created_at=write.now if old is None else old.created_at,
                        updated_at=write.now if changed or old is None else old.updated_at,
                        last_seen_at=write.now,
                    )

    async def list_descriptors(self, catalog: Catalog) -> list[StoredDescriptor]:
        self._read()
        table = self._descriptors[catalog]
        return [attrs.evolve(table[name]) for name in sorted(table)]

    async def delete_descriptors_unseen_since(self, cutoff: datetime) -> int:
        deleted = 0
        async with self._write():
            for table in self._descriptors.values():
                for name in [n for n, d in table.items() if d.last_seen_at < cutoff]:
                    del table[name]
                    deleted += 1
        return deleted
