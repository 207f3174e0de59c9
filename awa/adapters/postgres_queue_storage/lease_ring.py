"""The lease ring: rotation and prune of the slots that hold live attempts' mutable
state. An attempt's lease row is written in the current lease slot; prune moves the
leases of open attempts forward (:meth:`~.carry.Carry.live_leases`) and swaps the slot's
partition for an empty stand-in (:mod:`.swap`)."""

from __future__ import annotations

from psycopg import sql

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.carry import Carry
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.adapters.postgres_queue_storage.swap import Blocked, PartitionSwap
from awa.domain.policies import PruneOutcome, RotateOutcome
from awa.ports.clock import Clock


class LeaseRing:
    """Rotate the lease ring and reclaim its oldest slot."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        swap: PartitionSwap,
        carry: Carry,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._swap = swap
        self._carry = carry
        self._clock = clock

    async def _dirty_lease_slots(self, conn: DictConnection) -> set[int]:
        """Lease slots written since their last TRUNCATE. Rows moved out of a slot or
        updated in place leave dead versions behind: a slot is reclaimed, and entered
        again, only once it is physically empty, so those die with the TRUNCATE."""
        rows = await self._sql.rows(
            conn, self._sql["dirty_lease_slots"], {"s": self._sql.quoted_schema}
        )
        return {int(row["i"]) for row in rows}

    async def _written(self) -> bool:
        """Whether any lease slot was written since its last TRUNCATE, read without a
        lock (``lease_ring_written``). When none was, neither duty has anything to do,
        and it ends without the locking transaction: that transaction's row lock takes a
        transaction id, so each of its commits waited for a WAL flush (an idle worker
        flushed the WAL about eight times a second for these two duties alone)."""
        async with self._connections.conn() as conn:
            row = await self._sql.one(
                conn, self._sql["lease_ring_written"], {"s": self._sql.quoted_schema}
            )
        return bool(row and row["written"])

    def _lease_live(self, slot: int) -> sql.Composable:
        """Does ``slot`` hold the lease of an attempt whose claim is still open?"""
        return sql.SQL(self._sql.for_slot("lease_slot_live", slot).decode())

    async def rotate_leases(self) -> RotateOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: seal the current lease slot and
        send lease writes to the next one.

        Returns ``rotated``, ``skipped_idle`` (every lease slot is empty),
        ``skipped_busy`` (the next slot still holds rows) or ``skipped_locked``. The ring
        keeps turning while any slot holds rows, even with no new writes, so prune reaches
        every slot and an idle ring ends up empty.
        """
        async with translated_errors():
            if not await self._written():
                return RotateOutcome.SKIPPED_IDLE
        async with translated_errors(), self._connections.tx() as conn:
            state = await self._sql.one(conn, self._sql["lock_lease_ring_state"])
            if state is None:
                return RotateOutcome.SKIPPED_LOCKED
            current, count = int(state["current_lease_slot"]), int(state["lease_slot_count"])
            incoming = (current + 1) % count
            dirty = await self._dirty_lease_slots(conn)
            if incoming == current or not dirty:
                return RotateOutcome.SKIPPED_IDLE
            if incoming in dirty:
                return RotateOutcome.SKIPPED_BUSY
            await self._sql.rows(
                conn, self._sql["advance_lease_ring"], {"slot": incoming, "now": self._clock.now()}
            )
        return RotateOutcome.ROTATED

    async def prune_leases(self) -> PruneOutcome:
        """:class:`~awa.ports.maintenance.RingMaintenance`: truncate the oldest lease slot
        (the one the next lease rotation enters) once it holds no live lease.

        Returns ``pruned``, ``idle`` (that slot is empty), ``blocked`` (a live lease, or a
        lock held by a running transaction) or ``skipped_locked``.
        """
        try:
            async with translated_errors():
                await self._swap.clear(("leases",))
                if not await self._written():
                    return PruneOutcome.IDLE
            async with translated_errors(), self._connections.tx() as conn:
                return await self._prune_leases(conn)
        except Blocked:
            return PruneOutcome.BLOCKED

    async def _prune_leases(self, conn: DictConnection) -> PruneOutcome:
        state = await self._sql.one(conn, self._sql["lock_lease_ring_state"])
        if state is None:
            return PruneOutcome.SKIPPED_LOCKED
        current, count = int(state["current_lease_slot"]), int(state["lease_slot_count"])
        target = (current + 1) % count
        if target == current or target not in await self._dirty_lease_slots(conn):
            return PruneOutcome.IDLE
        # The leases of open attempts move into the current lease slot first (under their
        # advisory locks, taken without waiting), so a callback wait never pins the ring.
        if not await self._carry.live_leases(conn, target, current):
            return PruneOutcome.BLOCKED
        # Re-checked under the lock: a heartbeat that wrote a row in from a stale slot
        # number has committed; no lease writer can reach the slot until the swap commits.
        await self._swap.lock_and_swap(conn, target, ("leases",), unless=[self._lease_live(target)])
        return PruneOutcome.PRUNED
