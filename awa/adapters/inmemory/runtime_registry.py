"""An in-process :class:`~awa.ports.runtime_registry.RuntimeRegistry` for tests and models."""

from __future__ import annotations

from datetime import timedelta

from awa.ports.clock import Clock
from awa.ports.runtime_registry import RuntimeSnapshot


class InMemoryRuntimeRegistry:
    """Keeps the latest snapshot per runtime id in a dict.

    ``list_runtimes(live_within=...)`` measures age against ``clock`` (the same clock the
    runtimes stamp ``last_seen_at`` with, in tests usually a ``ManualClock``).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._rows: dict[str, RuntimeSnapshot] = {}

    async def upsert_runtime(self, snapshot: RuntimeSnapshot) -> None:
        self._rows[snapshot.id] = snapshot

    async def list_runtimes(self, *, live_within: timedelta | None = None) -> list[RuntimeSnapshot]:
        rows = list(self._rows.values())
        if live_within is not None:
            cutoff = self._clock.now() - live_within
            rows = [row for row in rows if row.last_seen_at >= cutoff]
        return sorted(rows, key=lambda row: (row.last_seen_at, row.id), reverse=True)

    async def remove_runtime(self, runtime_id: str) -> bool:
        return self._rows.pop(runtime_id, None) is not None
