"""Ring maintenance: what the maintenance leader asks of an engine that stores jobs in
rotating partitions (the queue-storage engine) so their space comes back by truncation."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol, runtime_checkable

from awa.domain.policies import DEFAULT_CARRY_BATCH, PruneOutcome, RingSeal, RotateOutcome


@runtime_checkable
class RingMaintenance(Protocol):
    """One step of ring upkeep per call; each returns its outcome (a
    :class:`~awa.domain.policies.RotateOutcome` or
    :class:`~awa.domain.policies.PruneOutcome`, string enums whose values are the words
    below) so the leader can back off (``skipped_busy``, ``blocked``) or go on
    (``rotated``, ``pruned``).

    Two rings: the queue ring (:meth:`rotate` / :meth:`prune`, at
    ``queue_rotate_interval``) holds job facts; the lease ring (:meth:`rotate_leases` /
    :meth:`prune_leases`, at ``lease_rotate_interval``) holds the mutable state of
    attempts that heartbeat, report progress or wait for a callback."""

    async def rotate(self, *, seal: RingSeal | None = None) -> RotateOutcome:
        """Seal the current ring slot and open the next one; with ``seal`` (the leader's
        rule), only once the slot is full or old enough.

        Returns ``rotated``, ``skipped_idle`` (the current slot holds nothing to seal),
        ``skipped_filling`` (``seal`` says the slot is neither full nor old yet),
        ``skipped_busy`` (the next slot still holds rows) or ``skipped_locked`` (another
        rotate or prune is running).
        """
        ...

    async def prune(
        self, *, failed_retention: timedelta, carry_batch: int = DEFAULT_CARRY_BATCH
    ) -> PruneOutcome:
        """Reclaim the oldest sealed slot once nothing live refers to it.

        Failed jobs finalized less than ``failed_retention`` ago are carried forward
        first. Returns ``pruned``, ``idle`` (no sealed slot holds rows), ``blocked``
        (live work, or a lock held by a running transaction), ``skipped_locked`` or
        ``carried``: the slot holds more than ``carry_batch`` unclaimed rows, and this
        call moved that many of them into the current slot without reclaiming it yet
        (each call does a bounded step; the next one goes on).
        """
        ...

    async def rotate_leases(self) -> RotateOutcome:
        """Seal the current lease slot and send lease writes (heartbeats, progress,
        callbacks) to the next one. Same outcome words as :meth:`rotate`."""
        ...

    async def prune_leases(self) -> PruneOutcome:
        """Truncate the oldest lease slot once it holds no lease of an open attempt.

        Returns ``pruned``, ``idle`` (that slot is empty), ``blocked`` (a live lease, or a
        lock held by a running transaction) or ``skipped_locked``.
        """
        ...
