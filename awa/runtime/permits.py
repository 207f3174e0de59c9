"""Worker capacity: which queue may start how many handlers right now.

Two modes, chosen by ``global_max_workers``:

* hard-reserved: every queue owns ``max_workers`` permits nobody else can use;
* weighted: each queue is guaranteed ``min_workers``; the rest of the global pool is
  overflow shared by ``weight`` among the queues that currently want more, and a queue
  may take idle overflow beyond its share (work-conserving).

All methods run on the event loop thread; none of them block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from awa.runtime.config import QueueConfig

Listener = Callable[[], None]


class PermitPool:
    """Permit accounting for every queue of one runtime."""

    def __init__(self, queues: Sequence[QueueConfig], global_max_workers: int | None) -> None:
        self.global_max_workers = global_max_workers
        self._configs = {q.name: q for q in queues}
        self._held = {q.name: 0 for q in queues}
        self._demand = {q.name: False for q in queues}
        self._listeners: dict[str, list[Listener]] = {q.name: [] for q in queues}
        self._overflow_total = (
            0
            if global_max_workers is None
            else global_max_workers - sum(q.min_workers or 0 for q in queues)
        )

    @property
    def weighted(self) -> bool:
        return self.global_max_workers is not None

    # ------------------------------------------------------------------ reads
    def in_flight(self, queue: str) -> int:
        return self._held[queue]

    def _min(self, queue: str) -> int:
        return self._configs[queue].min_workers or 0

    def overflow_held(self, queue: str) -> int:
        return max(0, self._held[queue] - self._min(queue))

    def _overflow_free(self) -> int:
        used = sum(self.overflow_held(q) for q in self._held)
        return max(0, self._overflow_total - used)

    def fair_share(self, queue: str) -> int:
        """Overflow permits ``queue`` may hold while others compete for them.

        The overflow is split by weight among the queues that want it (largest remainder,
        so the shares add up exactly); a queue nobody competes with gets all of it.
        """
        active = [
            q for q in self._held if q == queue or self._demand[q] or self.overflow_held(q) > 0
        ]
        weights = sum(self._configs[q].weight for q in active)
        exact = {q: self._overflow_total * self._configs[q].weight / weights for q in active}
        shares = {q: math.floor(v) for q, v in exact.items()}
        leftover = self._overflow_total - sum(shares.values())
        by_remainder = sorted(active, key=lambda q: (shares[q] - exact[q], q))
        for q in by_remainder[:leftover]:
            shares[q] += 1
        return shares[queue]

    def available(self, queue: str) -> int:
        """Permits ``queue`` could reserve right now."""
        held = self._held[queue]
        config = self._configs[queue]
        if not self.weighted:
            return max(0, (config.max_workers or 0) - held)
        from_min = max(0, self._min(queue) - held)
        overflow = min(
            self._overflow_free(), max(0, self.fair_share(queue) - self.overflow_held(queue))
        )
        grant = from_min + overflow
        if config.max_workers is not None:
            grant = min(grant, max(0, config.max_workers - held))
        return grant

    # ------------------------------------------------------------------ writes
    def try_reserve(self, queue: str, wanted: int) -> int:
        """Reserve up to ``wanted`` permits without waiting; returns how many were granted.

        In weighted mode asking for more than is granted marks the queue as wanting
        overflow, which shrinks other queues' fair share as their permits come back.
        """
        if wanted <= 0:
            return 0
        granted = min(wanted, self.available(queue))
        self._held[queue] += granted
        if self.weighted and granted < wanted:
            self._demand[queue] = True
        return granted

    def release(self, queue: str, count: int = 1, *, wake_self: bool = True) -> None:
        """Return permits. Listeners that could use them are woken; ``wake_self=False``
        skips ``queue``'s own listeners (a dispatcher handing back unused permits)."""
        if count <= 0:
            return
        if count > self._held[queue]:
            raise RuntimeError(f"permit over-release on queue {queue!r}")
        self._held[queue] -= count
        # In weighted mode freed overflow may go to any queue, so wake them all.
        targets = list(self._listeners) if self.weighted else [queue]
        for name in targets:
            if name == queue and not wake_self:
                continue
            for listener in list(self._listeners[name]):
                listener()

    def set_demand(self, queue: str, wants_more: bool) -> None:
        """Record whether the queue has backlog beyond what it holds (weighted fairness)."""
        self._demand[queue] = wants_more

    def add_listener(self, queue: str, listener: Listener) -> None:
        """Call ``listener`` whenever permits that ``queue`` could use are released."""
        self._listeners[queue].append(listener)
