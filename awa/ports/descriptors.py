"""Descriptor catalogs: where runtimes store the descriptors they declare.

One store per backend, in its control plane (Postgres: ``awa.queue_descriptors`` and
``awa.job_kind_descriptors``); ``tests/contract/test_descriptors.py`` is the executable
form of these docstrings. What the rows mean is :mod:`awa.domain.descriptors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import attrs

from awa.domain.descriptors import Catalog, Descriptor, StoredDescriptor


@attrs.frozen
class DeclaredDescriptor:
    """A descriptor as one runtime declares it, with its hash."""

    name: str
    descriptor: Descriptor
    descriptor_hash: str


@runtime_checkable
class DescriptorStore(Protocol):
    async def sync_descriptors(
        self,
        queues: Sequence[DeclaredDescriptor],
        kinds: Sequence[DeclaredDescriptor],
        *,
        sync_interval_ms: int,
    ) -> None:
        """Upsert the declared descriptors and mark them seen now (``last_seen_at``).

        The fields, hash and ``sync_interval_ms`` are replaced; ``updated_at`` moves
        only when the hash changes. Descriptors not in the lists are left alone."""
        ...

    async def list_descriptors(self, catalog: Catalog) -> list[StoredDescriptor]:
        """Every stored descriptor of ``catalog`` (``queue`` or ``job_kind``), by name."""
        ...

    async def delete_descriptors_unseen_since(self, cutoff: datetime) -> int:
        """Delete descriptors of both catalogs last seen before ``cutoff``; how many."""
        ...
