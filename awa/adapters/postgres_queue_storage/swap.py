"""Reclaiming a ring slot by swapping its partitions for empty stand-ins.

Prune (of the queue ring and of the lease ring) locks the slot's partitions, checks under
the lock that nothing live arrived, and swaps each partition with the empty stand-in the
install built, all in one round trip (:meth:`PartitionSwap.lock_and_swap`); the partition
taken out becomes the next stand-in and is emptied later (:meth:`PartitionSwap.clear`).
A role that may not swap partitions, or a slot without stand-ins, is truncated under the
lock instead.
"""

from __future__ import annotations

import logging

import anyio
from psycopg import errors as pg_errors
from psycopg import sql

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.statements import Statements, run, slot_table

log = logging.getLogger("awa.adapters.postgres_queue_storage")

RING_TABLES = ("ready_entries", "claims", "closures", "tombstones", "done_entries")
#: Prune asks for its ACCESS EXCLUSIVE lock with NOWAIT this many times, pausing
#: PRUNE_NOWAIT_PAUSE seconds in between, before it queues for it (at most the
#: ``prune_lock_timeout`` of ring.sql). A lock request that waits makes every later claim
#: wait behind it, so prune only queues when the slot is never free for a moment.
PRUNE_NOWAIT_TRIES = 25
PRUNE_NOWAIT_PAUSE = 0.002


class Blocked(Exception):
    """Prune found live work in its slot after taking the lock."""


class PartitionSwap:
    """The stand-ins of the ring's partitions and the locked swap."""

    def __init__(self, connections: Connections, statements: Statements) -> None:
        self._connections = connections
        self._sql = statements
        #: Set once the database refuses the partition swap to this role (it needs
        #: ownership of the ring tables); prune then truncates instead, as before, and
        #: holds its lock longer.
        self.denied = False
        self._unclean: set[str] | None = None
        #: Stand-ins this process swapped out, (table, slot): they hold the rows of the
        #: slot swapped out and are emptied by name, without looking them up.
        self._swapped: set[tuple[str, int]] = set()
        # Set once a prune found a slot without its stand-ins (said once per process).
        self._stand_ins_missing_said = False

    def child(self, table: str, slot: int) -> sql.Identifier:
        """The partition of ``table`` for ``slot``."""
        return slot_table(self._sql.schema, table, slot)

    def _parent(self, table: str) -> sql.Identifier:
        return sql.Identifier(self._sql.schema, table)

    def _stand_in(self, table: str, slot: int) -> sql.Identifier:
        return slot_table(self._sql.schema, table, slot, "_spare")

    async def _stand_ins_exist(
        self, conn: DictConnection, slot: int, tables: tuple[str, ...]
    ) -> bool:
        """Whether the slot's stand-ins for ``tables`` exist. The install builds one for
        every partition (``awa.queue_storage_install_spares``); a schema last installed
        by an older release has none until ``awa migrate`` runs, and prune truncates its
        slots in place meanwhile."""
        row = await self._sql.one(
            conn,
            self._sql["stand_ins_exist"],
            {"tables": list(tables), "s": self._sql.quoted_schema, "k": slot},
        )
        if row is not None and row["ready"]:
            return True
        if not self._stand_ins_missing_said:
            log.warning(
                "queue storage in %s: slot %d has no prebuilt stand-ins to swap in; prune "
                "truncates under its lock instead until `awa migrate` builds them",
                self._sql.schema,
                slot,
            )
            self._stand_ins_missing_said = True
        return False

    async def clear(self, tables: tuple[str, ...]) -> None:
        """Empty the stand-ins of ``tables`` that still hold the rows of a slot swapped
        out earlier, in one transaction, without waiting for their locks: a backend
        revalidating a plan made before the swap may hold one for a moment, and the next
        turn tries again (the swap refuses a stand-in that is not empty).

        The stand-ins this process swapped out are emptied by name. The catalog is
        searched (``unclean_stand_ins``) only for the tables whose stand-ins are not known:
        all of them the first time (an earlier leader may have left some), then those of
        a swap that was refused or failed."""
        unclean = self.unclean()
        search = unclean.intersection(tables)
        known = {(t, k) for t, k in self._swapped if t in tables}
        if self.denied or not (search or known):
            return
        emptied = True
        async with self._connections.conn() as conn:
            if search:
                rows = await self._sql.rows(
                    conn,
                    self._sql["unclean_stand_ins"],
                    {"tables": list(tables), "s": self._sql.quoted_schema},
                )
                # Names the catalog wrote (format's %I quotes them); they include the
                # known ones, which hold rows.
                names: list[sql.Composable] = [sql.SQL(row["stand_in"]) for row in rows]
            else:
                names = [self._stand_in(t, k) for t, k in sorted(known)]
            if names:
                try:
                    async with conn.transaction():
                        stand_ins = sql.SQL(", ").join(names)
                        await run(conn, self._sql.render("empty_stand_ins", stand_ins=stand_ins))
                except pg_errors.LockNotAvailable:
                    emptied = False
                except pg_errors.UndefinedTable:
                    # A stand-in known by name is gone (an install rebuilt the ring since):
                    # the next turn looks them up in the catalog instead.
                    emptied = False
                    unclean.update(t for t, _ in known)
                    self._swapped.difference_update(known)
        if emptied:
            unclean.difference_update(search)
            self._swapped.difference_update(known)

    def unclean(self) -> set[str]:
        """Ring tables whose stand-ins are looked up in the catalog (``unclean_stand_ins``)
        before they are emptied: all of them until this process has done so once (an
        earlier leader may have left rows), then those of a swap that was refused or
        failed. The stand-ins this process swapped out are known by name."""
        if self._unclean is None:
            self._unclean = {*RING_TABLES, "leases"}
        return self._unclean

    def refuse(self) -> None:
        if not self.denied:
            log.warning(
                "queue storage in %s: this role may not detach and attach partitions; "
                "prune truncates under its lock instead (the owner of the ring tables "
                "swaps partitions and holds the lock for less time)",
                self._sql.schema,
            )
        self.denied = True

    def _swap_steps(
        self, slot: int, tables: tuple[str, ...], *, swap: bool
    ) -> list[sql.Composable]:
        """Swap the slot's partitions with their empty stand-ins (``swap_partition``): the
        partition goes out under the stand-in's name and is emptied later
        (:meth:`clear`). Only catalog work: nothing is built, synced or dropped under the
        lock. A TRUNCATE instead when ``swap`` is false.

        The stand-ins are built by the install, never here: building an index (even an
        empty one) syncs its file, which is why a TRUNCATE of the ring's tables took 50-150
        ms under its lock. A stand-in is the partition an earlier swap took out, so the
        ring's relations are created once and then only change places: no catalog rows for
        new tables, columns and types every second, and every backend's catalog caches
        stay warm."""
        if not swap:
            if not tables:
                return []
            children = sql.SQL(", ").join(self.child(t, slot) for t in tables)
            return [self._sql.fragment("truncate_partitions", tables=children)]
        return [
            self._sql.fragment(
                "swap_partition",
                parent=self._parent(table),
                child=self.child(table, slot),
                out_name=sql.Identifier(f"{table}_{slot}_out"),
                stand_in=self._stand_in(table, slot),
                child_name=sql.Identifier(f"{table}_{slot}"),
                out=slot_table(self._sql.schema, table, slot, "_out"),
                stand_in_name=sql.Identifier(f"{table}_{slot}_spare"),
                k=sql.Literal(slot),
            )
            for table in tables
        ]

    def locked(
        self, slot: int, tables: tuple[str, ...], swapped: tuple[str, ...]
    ) -> sql.Composable:
        """What a prune of ``slot`` locks (``lock_nowait_then``): the parents of the
        ``swapped`` tables and the slot's partitions of ``tables``, each ONLY. The other
        slots' partitions are not locked, so statements that read a slot by name
        (``claim_in_slot``) go on during the swap."""
        names = [self._parent(t) for t in swapped] + [self.child(t, slot) for t in tables]
        # the statement says ONLY before the first name; each other name gets its own
        return sql.SQL(", ONLY ").join(names)

    async def lock_and_swap(
        self,
        conn: DictConnection,
        slot: int,
        tables: tuple[str, ...],
        unless: list[sql.Composable],
        *,
        swap: tuple[str, ...] | None = None,
        also: sql.Composable | None = None,
    ) -> None:
        """Lock the slot's partitions of ``tables`` (and the ring tables whose partition is
        swapped), check, and swap, in one round trip. ``unless`` are conditions that must
        all be false under the lock (else Blocked); ``swap`` (default: all of ``tables``)
        are the partitions replaced by their empty stand-ins; ``also`` is a statement run
        under the lock after the check."""
        swapped = tables if swap is None else swap

        def plan(swapping: bool) -> tuple[sql.Composable, sql.Composable]:
            locked = self.locked(slot, tables, swapped if swapping else ())
            conditions = list(unless)
            if swapping and swapped:
                # a stand-in that could not be emptied yet is never swapped in
                conditions += [
                    self._sql.fragment("stand_in_in_use", stand_in=self._stand_in(t, slot))
                    for t in swapped
                ]
            check = self._sql.fragment(
                "slot_check", unless=sql.SQL(" OR ").join(conditions), k=sql.Literal(slot)
            )
            steps = [
                self._sql.fragment("release_quietly"),
                check,
                *([also] if also else []),
                *self._swap_steps(slot, swapped, swap=swapping),
            ]
            return locked, sql.SQL("; ").join(steps)

        swapping = (
            bool(swapped) and not self.denied and await self._stand_ins_exist(conn, slot, swapped)
        )
        try:
            await self._lock_briefly(conn, *plan(swapping))
        except pg_errors.InsufficientPrivilege:
            if not swapping:
                raise
            # The refused swap's savepoint is rolled back: this turn truncates instead.
            self.refuse()
            swapping = False
            await self._lock_briefly(conn, *plan(False))
        except pg_errors.UndefinedTable as exc:
            # a stand-in was dropped since it was looked for (an install rebuilt it): the
            # next turn finds the new one
            self.unclean().update(swapped)
            raise Blocked() from exc
        except BaseException:
            # A swap refused for a stand-in that is not empty (another leader's, swapped
            # out just before it lost the lead) needs one emptied: looked up next turn.
            self.unclean().update(swapped)
            raise
        if swapping:
            # After the swap the stand-ins hold the rows taken out. Should the
            # transaction not commit, they are empty, and emptying them again is harmless.
            self._swapped.update((t, slot) for t in swapped)

    async def _lock_briefly(
        self, conn: DictConnection, tables: sql.Composable, then: sql.Composable
    ) -> None:
        """Take ACCESS EXCLUSIVE on ``tables`` and run ``then`` in the same round trip,
        without making claims queue behind the request: NOWAIT tries first (each in a
        savepoint), then one bounded wait. A lock request that waits makes every later
        reader of the table wait behind it, and claims read every slot. Raises Blocked on
        a timeout, on a deadlock report (a server whose deadlock_timeout is below the lock
        timeout reports the wait that way) and when ``then`` finds rows that arrived in the
        slot since it was read (SQLSTATE 55000)."""
        nowait = self._sql.render("lock_nowait_then", tables=tables, then=then)
        try:
            for _ in range(PRUNE_NOWAIT_TRIES):
                try:
                    async with conn.transaction():
                        await run(conn, nowait)
                    return
                except pg_errors.LockNotAvailable:
                    await anyio.sleep(PRUNE_NOWAIT_PAUSE)
            await run(conn, self._sql["prune_lock_timeout"])
            async with conn.transaction():
                await run(conn, self._sql.render("lock_then", tables=tables, then=then))
        except (
            pg_errors.LockNotAvailable,
            pg_errors.DeadlockDetected,
            pg_errors.ObjectNotInPrerequisiteState,
        ) as exc:
            raise Blocked() from exc
