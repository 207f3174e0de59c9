"""Maintenance of the routing engine: it reads the state afresh and runs on every engine
the state keeps alive; from ``mixed_transition`` on it also moves the waiting canonical
backlog into queue storage."""

from __future__ import annotations

from datetime import timedelta

from awa.adapters.routing.base import C, RoutingBase
from awa.domain.policies import DEFAULT_CARRY_BATCH, PruneOutcome, RingSeal, RotateOutcome
from awa.domain.transition import (
    TransitionState,
    maintains_canonical,
    maintains_queue_storage,
)
from awa.ports.maintenance import RingMaintenance
from awa.ports.storage import Rescued, StorageEngine


class MaintenanceOps(RoutingBase[C]):
    """Promotion, rescue, retention and ring upkeep."""

    async def move_canonical_backlog(self, *, limit: int = 1000) -> int:
        """Move waiting canonical jobs into queue storage (only once producers write there)."""
        return await self._transition.move_canonical_backlog(limit=limit)

    async def promote_due(self, *, limit: int = 4096) -> int:
        status = await self.status(max_age=0.0)
        moved = 0
        if status.state in (TransitionState.MIXED_TRANSITION, TransitionState.ACTIVE):
            moved = await self.move_canonical_backlog(limit=limit)
        promoted = 0
        if maintains_canonical(status.state):
            promoted += await self._canonical.promote_due(limit=limit)
        if maintains_queue_storage(status.state):
            promoted += await self.queue_storage(status.schema).promote_due(limit=limit)
        return promoted + moved

    async def _maintained(self) -> list[StorageEngine]:
        status = await self.status(max_age=0.0)
        engines: list[StorageEngine] = []
        if maintains_canonical(status.state):
            engines.append(self._canonical)
        if maintains_queue_storage(status.state):
            engines.append(self.queue_storage(status.schema))
        return engines

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_stale_heartbeats(staleness=staleness))
        return rescued

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_expired_deadlines())
        return rescued

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_expired_callbacks())
        return rescued

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        # Canonical terminal history outlives the transition, so it is always cleaned.
        deleted = 0
        for engine in self._read_order(await self.status(max_age=0.0)):
            deleted += await engine.cleanup_retention(
                completed=completed, failed=failed, batch_size=batch_size
            )
        return deleted

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        return await self._dlq_engine(await self.status(max_age=0.0)).cleanup_dlq(
            retention=retention, batch_size=batch_size
        )

    # ---------------------------------------------------------------- ring upkeep
    async def _ring(self) -> RingMaintenance | None:
        """The queue-storage ring once producers write there (before that no slot holds
        rows); ``None`` also when the queue-storage engine keeps no ring."""
        status = await self.status(max_age=0.0)
        if not maintains_queue_storage(status.state):
            return None
        return self._target(status.schema).ring

    async def rotate(self, *, seal: RingSeal | None = None) -> RotateOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: rotate the queue-storage ring
        once producers write there; before that there is nothing to seal."""
        ring = await self._ring()
        return RotateOutcome.SKIPPED_IDLE if ring is None else await ring.rotate(seal=seal)

    async def prune(
        self, *, failed_retention: timedelta, carry_batch: int = DEFAULT_CARRY_BATCH
    ) -> PruneOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: prune the oldest queue-storage
        slot once producers write there; before that no slot holds rows."""
        ring = await self._ring()
        return (
            PruneOutcome.IDLE
            if ring is None
            else await ring.prune(failed_retention=failed_retention, carry_batch=carry_batch)
        )

    async def rotate_leases(self) -> RotateOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: rotate the queue-storage lease
        ring once producers write there."""
        ring = await self._ring()
        return RotateOutcome.SKIPPED_IDLE if ring is None else await ring.rotate_leases()

    async def prune_leases(self) -> PruneOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: prune the oldest queue-storage
        lease slot once producers write there."""
        ring = await self._ring()
        return PruneOutcome.IDLE if ring is None else await ring.prune_leases()
