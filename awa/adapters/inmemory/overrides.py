"""Live queue overrides of the in-memory engine (the ``QueueOverrideStore`` port)."""

from __future__ import annotations

from typing import Any

from awa.adapters.inmemory.base import EngineBase
from awa.domain.overrides import QueueOverrides, validate_overrides
from awa.ports.clock import Clock


class OverrideOps(EngineBase):
    """Overrides by queue name; like the rest of a queue's settings, ``reset`` clears them."""

    def __init__(self, clock: Clock, *args: Any, **kwargs: Any) -> None:
        super().__init__(clock, *args, **kwargs)
        self._overrides: dict[str, QueueOverrides] = {}

    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        self._read()
        return self._overrides.get(queue)

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        validate_overrides(overrides)
        async with self._write():
            if overrides.is_empty:
                self._overrides.pop(queue, None)
            else:
                self._overrides[queue] = overrides

    async def clear_queue_overrides(self, queue: str) -> bool:
        async with self._write():
            return self._overrides.pop(queue, None) is not None

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        self._read()
        return {name: self._overrides[name] for name in sorted(self._overrides)}

    async def reset(self) -> None:
        await super().reset()  # type: ignore[misc]
        self._overrides.clear()
