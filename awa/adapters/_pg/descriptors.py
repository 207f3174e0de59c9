"""Descriptor catalogs shared by every Postgres engine
(:class:`~awa.ports.descriptors.DescriptorStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.descriptors import Catalog, Descriptor, StoredDescriptor
from awa.ports.clock import Clock
from awa.ports.descriptors import DeclaredDescriptor

_TABLES: dict[Catalog, tuple[str, str]] = {
    "queue": ("queue_descriptors", "queue"),
    "job_kind": ("job_kind_descriptors", "kind"),
}


def _query(name: str, catalog: Catalog) -> bytes:
    table, key = _TABLES[catalog]
    text = load_queries("awa.adapters._pg", "descriptors.sql")[name]
    return text.replace("{table}", table).replace("{key}", key).encode()


def _stored(row: dict[str, Any]) -> StoredDescriptor:
    return StoredDescriptor(
        name=row["name"],
        descriptor=Descriptor(
            display_name=row["display_name"],
            description=row["description"],
            owner=row["owner"],
            docs_url=row["docs_url"],
            tags=row["tags"] or (),
            extra=row["extra"] or {},
        ),
        descriptor_hash=row["descriptor_hash"],
        sync_interval_ms=int(row["sync_interval_ms"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_seen_at=row["last_seen_at"],
    )


class PgDescriptorStore:
    """:class:`~awa.ports.descriptors.DescriptorStore` on the descriptor tables (one per
    backend, on its pool)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection], clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def sync_descriptors(
        self,
        queues: Sequence[DeclaredDescriptor],
        kinds: Sequence[DeclaredDescriptor],
        *,
        sync_interval_ms: int,
    ) -> None:
        if not queues and not kinds:
            return
        now = self._clock.now()
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            for catalog, declared in (("queue", queues), ("job_kind", kinds)):
                for item in declared:
                    d = item.descriptor
                    await conn.execute(
                        _query("sync_descriptor", catalog),  # type: ignore[arg-type]
                        {
                            "name": item.name,
                            "display_name": d.display_name,
                            "description": d.description,
                            "owner": d.owner,
                            "docs_url": d.docs_url,
                            "tags": list(d.tags),
                            "extra": Jsonb(d.extra),
                            "hash": item.descriptor_hash,
                            "sync_interval_ms": sync_interval_ms,
                            "now": now,
                        },
                    )

    async def list_descriptors(self, catalog: Catalog) -> list[StoredDescriptor]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("list_descriptors", catalog))
            return [_stored(dict(row)) for row in await cur.fetchall()]

    async def delete_descriptors_unseen_since(self, cutoff: datetime) -> int:
        deleted = 0
        async with translated_errors(), self._pool.connection() as conn:
            for catalog in _TABLES:
                cur = await conn.execute(_query("delete_unseen", catalog), {"cutoff": cutoff})
                deleted += cur.rowcount
        return deleted
