"""The fleet-wide rate limiters (ADR 0029, "Rate limits"): read for operator surfaces,
pruned by the maintenance leader."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from awa.domain.rate_limits import LimiterState


class RateLimiterReader(Protocol):
    """The limiters the claims of a backend keep (``awa.rate_limiters`` on Postgres)."""

    async def limiter_states(self) -> list[LimiterState]:
        """Every limiter a claim has used, by queue then limiter name (``""``, the
        queue's own, first), with its theoretical arrival time and the limit it was last
        claimed under. Read-only; a limiter never used has no state."""
        ...

    async def prune_idle_limiters(self, *, now: datetime, limit: int) -> int:
        """Delete at most ``limit`` limiters that are idle at ``now``
        (:func:`~awa.domain.rate_limits.idle`: refilled to their whole burst, so no row
        admits the same as the row), skipping those a claim holds; return how many went.
        A claim recreates a key's limiter on its next use."""
        ...
