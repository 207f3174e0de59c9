"""Live queue overrides: where operators' per-queue overrides are stored.

One store per backend, in its control plane (Postgres: the ``override_*`` columns of
``awa.queue_meta``); ``tests/contract/test_queue_overrides.py`` is the executable form of
these docstrings. How a dispatcher applies them is :mod:`awa.domain.overrides`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from awa.domain.overrides import QueueOverrides


@runtime_checkable
class QueueOverrideStore(Protocol):
    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        """The overrides of ``queue``, or ``None`` when none is set."""
        ...

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        """Replace the whole override state of ``queue`` (a field left ``None`` is
        cleared). Validated first (``ValidationError``); keeps the pause and shards."""
        ...

    async def clear_queue_overrides(self, queue: str) -> bool:
        """Clear every override of ``queue``; ``False`` if it had none."""
        ...

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        """Every queue with at least one override, by name."""
        ...
