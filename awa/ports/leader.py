"""Cluster-wide election of the single maintenance leader."""

from __future__ import annotations

from typing import Protocol


class LeaderLock(Protocol):
    async def try_acquire(self) -> bool:
        """Try to become leader without waiting. Idempotent: returns True again while held."""
        ...

    async def still_held(self) -> bool:
        """Check the lock is still ours (e.g. its connection is alive)."""
        ...

    async def release(self) -> None:
        """Give up leadership; safe to call when not held."""
        ...


class LeaderCandidates(Protocol):
    """Something that hands out candidates for the cluster's maintenance leadership."""

    def leader_lock(self) -> LeaderLock:
        """A new, independent candidate (each call is a different would-be leader)."""
        ...
