"""Live queue overrides in memory (the ``QueueOverrideStore`` port)."""

from __future__ import annotations

from awa.adapters.inmemory.store import SharedStore
from awa.domain.overrides import QueueOverrides, validate_overrides


class InMemoryQueueOverrideStore:
    """Overrides by queue name, kept with the queue settings of the in-memory store they
    belong to: like the rest of a queue's settings, an engine's ``reset`` clears them (as
    it empties ``awa.queue_meta`` on Postgres)."""

    def __init__(self, store: SharedStore) -> None:
        self._overrides = store.overrides

    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        return self._overrides.get(queue)

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        validate_overrides(overrides)
        if overrides.is_empty:
            self._overrides.pop(queue, None)
        else:
            self._overrides[queue] = overrides

    async def clear_queue_overrides(self, queue: str) -> bool:
        return self._overrides.pop(queue, None) is not None

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        return {name: self._overrides[name] for name in sorted(self._overrides)}
