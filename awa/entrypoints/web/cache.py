"""A per-key TTL cache for the admin reads that pages poll.

* A value younger than the TTL is served as is.
* Concurrent misses for one key share one load (request coalescing).
* A value older than the TTL but younger than twice it is served while one background
  load refreshes it, so a poll never waits on a slow exact count once warm.
* Mutations call :meth:`invalidate`: the next read waits for a fresh value.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("awa.web.cache")

#: At most this many values are kept (job-list pages are cached per filter and cursor).
MAX_ENTRIES = 512


class ReadCache:
    def __init__(self, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = max(0.0, ttl)
        self._clock = clock
        self._values: dict[str, tuple[float, Any]] = {}
        self._loading: dict[str, asyncio.Task[Any]] = {}
        self._generation = 0
        self.loads = 0

    @property
    def ttl(self) -> float:
        return self._ttl

    async def get(self, key: str, load: Callable[[], Awaitable[Any]]) -> Any:
        """The cached value of ``key``, loading it with ``load`` when missing or expired."""
        if self._ttl == 0:
            self.loads += 1
            return await load()
        now = self._clock()
        held = self._values.get(key)
        if held is not None:
            age = now - held[0]
            if age < self._ttl:
                return held[1]
            if age < 2 * self._ttl:
                self._start(key, load)
                return held[1]
        return await asyncio.shield(self._start(key, load))

    def _start(self, key: str, load: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
        task = self._loading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(key, load))
            task.add_done_callback(_retrieve)
            self._loading[key] = task
        return task

    async def _load(self, key: str, load: Callable[[], Awaitable[Any]]) -> Any:
        generation = self._generation
        self.loads += 1
        try:
            value = await load()
        finally:
            if self._loading.get(key) is asyncio.current_task():
                del self._loading[key]
        # A mutation during the load may have changed what it read: do not keep it.
        if generation == self._generation:
            self._values[key] = (self._clock(), value)
            if len(self._values) > MAX_ENTRIES:
                self._evict()
        return value

    def _evict(self) -> None:
        # Keys include filters and cursors, so they are many: expired ones go first, then
        # the oldest, down to the bound.
        horizon = self._clock() - 2 * self._ttl
        for key in [k for k, (at, _) in self._values.items() if at < horizon]:
            del self._values[key]
        for key, _ in sorted(self._values.items(), key=lambda item: item[1][0])[
            : max(0, len(self._values) - MAX_ENTRIES)
        ]:
            del self._values[key]

    def invalidate(self) -> None:
        """Forget every value and every load in flight (after a mutation)."""
        self._generation += 1
        self._values.clear()
        self._loading.clear()


def _retrieve(task: asyncio.Task[Any]) -> None:
    # A background refresh that fails is logged; the next read retries it.
    if not task.cancelled() and task.exception() is not None:
        log.warning("an admin read failed: %s", task.exception())
