"""Cluster-wide election of the single maintenance leader: a lease that expires.

The lease lives in the store (a row in Postgres, ADR 0014), never in a session: a holder
keeps it only by renewing it, so a stopped, blocked or partitioned holder loses it one ttl
after its last renewal and a follower takes over. Holders count the lease on their own
clock from before each request left (:class:`awa.domain.leadership.LeasePolicy`), so a
holder stops acting no later than the store lets another candidate in.
"""

from __future__ import annotations

from typing import Protocol

from awa.domain.leadership import Lease


class LeaderLock(Protocol):
    async def try_acquire(self, ttl: float) -> Lease:
        """Take the lease if nobody holds it or its holder's lease ended, or renew it if
        this candidate holds it, for ``ttl`` seconds from the store's now; never waits
        for another holder. Idempotent: asking again while held renews. A follower's
        answer says how long the current holder's lease has left (``expires_in``)."""
        ...

    async def still_held(self) -> bool:
        """Whether the store still names this candidate as an unexpired holder (read
        only; does not renew)."""
        ...

    async def release(self) -> None:
        """Give the lease up at once (a follower may take it immediately); safe to call
        when not held, and from any event loop."""
        ...


class LeaderCandidates(Protocol):
    """Something that hands out candidates for the cluster's maintenance leadership."""

    def leader_lock(self) -> LeaderLock:
        """A new, independent candidate (each call is a different would-be leader)."""
        ...
