"""Reading the fleet-wide rate limiters (ADR 0029, "Rate limits") for operator surfaces."""

from __future__ import annotations

from typing import Protocol

from awa.domain.rate_limits import LimiterState


class RateLimiterReader(Protocol):
    """The limiters the claims of a backend keep (``awa.rate_limiters`` on Postgres)."""

    async def limiter_states(self) -> list[LimiterState]:
        """Every limiter a claim has used, by queue then limiter name (``""``, the
        queue's own, first), with its theoretical arrival time and the limit it was last
        claimed under. Read-only; a limiter never used has no state."""
        ...
