"""Ring maintenance of the queue-storage engine: rotation and prune by TRUNCATE.

Both are meant for the maintenance leader. Each call does at most one step and reports
what happened, so the leader can back off on ``blocked`` / ``skipped_busy``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage._base import (
    PRUNE_GATE,
    Resolved,
    Writes,
    row_json,
)
from awa.adapters.postgres_queue_storage.carry import CarryOps
from awa.adapters.postgres_queue_storage.long_tx import LongTransactionOps
from awa.adapters.postgres_queue_storage.statements import run, slot_table
from awa.domain.states import (
    DEFAULT_UNIQUE_STATES,
    JobState,
    bitstring_to_mask,
    mask_contains,
)

log = logging.getLogger("awa.adapters.postgres_queue_storage")

RING_TABLES = ("ready_entries", "claims", "closures", "tombstones", "done_entries")
DEFAULT_FAILED_RETENTION = timedelta(hours=72)
#: The states of heads prune drops with their slot (live heads are carried forward).
_DROPPED_STATES = frozenset(
    s.sql_name for s in (JobState.Completed, JobState.Cancelled, JobState.Failed)
)
#: Prune asks for its ACCESS EXCLUSIVE lock with NOWAIT this many times, pausing
#: PRUNE_NOWAIT_PAUSE seconds in between, before it queues for it (at most the
#: ``prune_lock_timeout`` of ring.sql). A lock request that waits makes every later claim
#: wait behind it, so prune only queues when the slot is never free for a moment.
PRUNE_NOWAIT_TRIES = 25
PRUNE_NOWAIT_PAUSE = 0.002
#: How far back completion buckets are kept (the read window is one hour).
COMPLETIONS_KEPT = timedelta(hours=2)


class _Blocked(Exception):
    """Prune found live work in its slot after taking the lock."""


class RingOps(CarryOps, LongTransactionOps):
    """Rotate the queue ring and truncate its oldest sealed slot."""

    #: Set once the database refuses the partition swap to this role (it needs CREATE on
    #: the schema and ownership of the ring tables); prune then truncates instead, as
    #: before, and holds its lock longer.
    _swap_denied = False
    _unclean: set[str] | None = None

    def _child(self, table: str, slot: int) -> sql.Identifier:
        return slot_table(self._schema, table, slot)

    def _parent(self, table: str) -> sql.Identifier:
        return sql.Identifier(self._schema, table)

    async def _one(self, conn: DictConnection, statement: bytes, params: Any = None) -> Any:
        rows = await self._sql.rows(conn, statement, params)
        return rows[0] if rows else None

    async def _slot_has_rows(self, conn: DictConnection, slot: int) -> bool:
        row = await self._one(conn, self._sql.for_slot("slot_has_rows", slot))
        return bool(row and row["busy"])

    async def rotate_queue_ring(self) -> str:
        """Seal the current slot and open the next one.

        Returns ``rotated``, ``skipped_idle`` (nothing to seal), ``skipped_busy`` (the next
        slot still holds rows) or ``skipped_locked`` (another rotate / prune is running).
        """
        async with translated_errors(), self._tx() as conn:
            state = await self._one(conn, self._sql["lock_ring_state"])
            if state is None:
                return "skipped_locked"
            current, count = int(state["current_slot"]), int(state["slot_count"])
            incoming = (current + 1) % count
            if not await self._slot_has_rows(conn, current):
                return "skipped_idle"
            if await self._slot_has_rows(conn, incoming):
                return "skipped_busy"
            now = self._clock.now()
            await self._sql.rows(conn, self._sql["advance_ring"], {"slot": incoming, "now": now})
            # Completion buckets older than the one-hour window are never read again.
            await self._exec(conn, "prune_completions", before=now - COMPLETIONS_KEPT)
        return "rotated"

    async def rotate(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: :meth:`rotate_queue_ring`."""
        return await self.rotate_queue_ring()

    async def prune(self, *, failed_retention: timedelta = DEFAULT_FAILED_RETENTION) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: :meth:`prune_oldest`."""
        return await self.prune_oldest(failed_retention=failed_retention)

    async def prune_oldest(self, *, failed_retention: timedelta = DEFAULT_FAILED_RETENTION) -> str:
        """Truncate the oldest sealed slot (the one the next rotation enters) once nothing
        live refers to it.

        Returns ``pruned``, ``idle`` (that slot holds no rows), ``blocked`` (live work
        or a lock held by a running transaction) or ``skipped_locked``. Failed jobs younger
        than ``failed_retention`` are carried forward into the current slot first.
        """
        target = None
        try:
            async with translated_errors():
                await self._clear_spares(RING_TABLES)
                target = await self._prune_target()
                if target is not None:
                    await self._prepare_spares(target)
            async with translated_errors(), self._tx() as conn:
                outcome = await self._prune(conn, failed_retention)
        except _Blocked:
            outcome = "blocked"
        async with translated_errors():
            # Say why reclamation waits (a long transaction holding the slot or the
            # xmin horizon), and compact the control tables once it has ended.
            if outcome == "blocked" and target is not None:
                await self._explain_blocked(target, RING_TABLES)
            elif outcome == "pruned":
                await self._record("queue", "pruned")
            await self._watch_horizon()
        return outcome

    async def _prune_target(self) -> int | None:
        """The slot the next rotation enters, if it holds rows."""
        async with self._conn() as conn:
            state = await self._one(conn, self._sql["read_ring_state"])
            if state is None:
                return None
            current, count = int(state["current_slot"]), int(state["slot_count"])
            target = (current + 1) % count
            if target == current or not await self._slot_has_rows(conn, target):
                return None
            return target

    def _spare(self, table: str, slot: int) -> sql.Identifier:
        return slot_table(self._schema, table, slot, "_spare")

    async def _prepare_spares(self, slot: int, tables: tuple[str, ...] = RING_TABLES) -> None:
        """Empty stand-ins for the slot's partitions, indexes and storage options
        included, ready ahead of the swap in their own transaction: building an index (even
        an empty one) syncs its file, which is why a TRUNCATE of the ring's tables took
        50-150 ms under its lock. A stand-in is the partition an earlier swap took out
        (emptied by :meth:`_clear_spares`), so the ring's relations are created once and
        then only change places: no catalog rows for new tables, columns and types every
        second, and every backend's catalog caches stay warm."""
        if self._swap_denied:
            return
        try:
            await self._build_spares(slot, tables)
        except pg_errors.InsufficientPrivilege:
            self._refuse_swap()

    async def _clear_spares(self, tables: tuple[str, ...]) -> None:
        """Empty the stand-ins of ``tables`` that still hold the rows of a slot swapped
        out earlier, in one transaction, without waiting for their locks: a backend
        revalidating a plan made before the swap may hold one for a moment, and the next
        turn tries again (the swap refuses a stand-in that is not empty)."""
        unclean = self._unclean_spares()
        if self._swap_denied or not unclean.intersection(tables):
            return
        emptied = True
        async with self._conn() as conn:
            rows = await self._sql.rows(
                conn,
                self._sql["unclean_spares"],
                {"tables": list(tables), "s": self._sql.quoted_schema},
            )
            if rows:
                # Names the catalog wrote (format's %I quotes them).
                spares = sql.SQL(", ").join(sql.SQL(row["spare"]) for row in rows)
                try:
                    async with conn.transaction():
                        await run(conn, self._sql.render("empty_spares", spares=spares))
                except pg_errors.LockNotAvailable:
                    emptied = False
        if emptied:
            unclean.difference_update(tables)

    def _unclean_spares(self) -> set[str]:
        """Ring tables whose stand-ins may hold rows: all of them until this process has
        emptied them once (an earlier leader may have left some), then the ones it tried
        to swap since."""
        if self._unclean is None:
            self._unclean = {*RING_TABLES, "leases"}
        return self._unclean

    def _refuse_swap(self) -> None:
        if not self._swap_denied:
            log.warning(
                "queue storage in %s: this role may not create or attach partitions; "
                "prune truncates under its lock instead (grant CREATE on the schema and "
                "ownership of its tables to avoid the longer lock)",
                self._schema,
            )
        self._swap_denied = True

    async def _build_spares(self, slot: int, tables: tuple[str, ...]) -> None:
        async with self._conn() as conn:
            missing = await self._sql.rows(
                conn,
                self._sql["missing_spares"],
                {"tables": list(tables), "s": self._sql.quoted_schema, "k": slot},
            )
            for row in missing:
                table, options = row["t"], row["options"]
                names = {"spare": self._spare(table, slot), "parent": self._parent(table)}
                if options:
                    # Storage options as the catalog holds them (name=value).
                    listed = sql.SQL(", ").join(sql.SQL(option) for option in options)
                    statement = self._sql.render(
                        "create_spare_with_options", options=listed, **names
                    )
                else:
                    statement = self._sql.render("create_spare", **names)
                await run(conn, statement)

    def _swap_steps(self, slot: int, tables: tuple[str, ...]) -> list[sql.Composable]:
        """Swap the slot's partitions with their empty stand-ins (``swap_partition``), or
        truncate them where this role may not swap."""
        if self._swap_denied:
            if not tables:
                return []
            children = sql.SQL(", ").join(self._child(t, slot) for t in tables)
            return [self._sql.fragment("truncate_partitions", tables=children)]
        return [
            self._sql.fragment(
                "swap_partition",
                parent=self._parent(table),
                child=self._child(table, slot),
                out_name=sql.Identifier(f"{table}_{slot}_out"),
                spare=self._spare(table, slot),
                child_name=sql.Identifier(f"{table}_{slot}"),
                out=slot_table(self._schema, table, slot, "_out"),
                spare_name=sql.Identifier(f"{table}_{slot}_spare"),
                k=sql.Literal(slot),
            )
            for table in tables
        ]

    async def _lock_and_swap(
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
        all be false under the lock (else _Blocked); ``swap`` (default: all of ``tables``)
        are the partitions replaced by their empty stand-ins; ``also`` is a statement run
        under the lock after the check."""
        swapped = tables if swap is None else swap
        parents = [] if self._swap_denied else [self._parent(t) for t in swapped]
        locked = sql.SQL(", ").join(parents + [self._child(t, slot) for t in tables])
        conditions = list(unless)
        if parents:
            conditions += [
                self._sql.fragment("spare_in_use", spare=self._spare(t, slot)) for t in swapped
            ]
        check = self._sql.fragment(
            "slot_check", unless=sql.SQL(" OR ").join(conditions), k=sql.Literal(slot)
        )
        # Looked at again on the next turn whatever happens: after a swap the stand-ins
        # hold the rows taken out, and a swap refused for a stand-in that is not empty
        # (another leader's, swapped out just before it lost the lead) needs one emptied.
        self._unclean_spares().update(swapped)
        try:
            await self._lock_briefly(
                conn,
                locked,
                sql.SQL("; ").join(
                    [check, *([also] if also else []), *self._swap_steps(slot, swapped)]
                ),
            )
        except pg_errors.InsufficientPrivilege as exc:
            self._refuse_swap()
            raise _Blocked() from exc
        except pg_errors.UndefinedTable as exc:
            # a stand-in is missing (the target moved on since they were built): the next
            # turn builds them for its own target
            raise _Blocked() from exc

    async def _prune(self, conn: DictConnection, failed_retention: timedelta) -> str:
        state = await self._one(conn, self._sql["lock_ring_state"])
        if state is None:
            return "skipped_locked"
        current, count = int(state["current_slot"]), int(state["slot_count"])
        # Only the slot the next rotation enters is reclaimed: it is the oldest in ring
        # order, and waiting until the ring wraps to it keeps completed history readable for
        # about slot_count x rotate interval instead of dropping each slot once sealed.
        target = (current + 1) % count
        if target == current or not await self._slot_has_rows(conn, target):
            return "idle"
        # Everything that takes time happens before the slot is locked, so claims and
        # completions (which read every slot) never queue behind a long prune:
        # - the gate keeps operator changes of terminal jobs out while the slot's jobs are
        #   read and carried forward or dropped;
        # - the slot's row counts, taken first, prove under the lock that nothing was
        #   written to it since (its tables are append-only), so what was read still holds.
        gate = await self._one(
            conn, self._sql["try_prune_gate"], {"gate": PRUNE_GATE, "schema": self._schema}
        )
        if not (gate and gate["ok"]):
            raise _Blocked()
        seen = await self._slot_row_counts(conn, target)
        # What is still live in the slot (unclaimed rows, open attempts) is copied into
        # the current slot first; the copies commit with the swap or not at all.
        carried_jobs, carried_claims = await self._carry_live_rows(conn, target, current)
        writes = Writes(self._clock.now())
        floor = writes.now - failed_retention
        # Only what dropping a job needs is read for every head (no args, no metadata):
        # building whole job records for a slot of thousands of jobs took tens of ms of
        # the worker's event loop. Failed jobs that are kept are read whole.
        heads = await self._head_states_in_slot(conn, target, live=carried_jobs)
        kept = [
            h["id"]
            for h in heads
            if h["state"] == JobState.Failed.sql_name
            and h["finalized_at"] is not None
            and h["finalized_at"] > floor
        ]
        if kept:
            carry = [
                row_json(head.job, head.ordering_key)
                for head in await self._heads_in_slot(conn, target, kept)
            ]
            await self._exec(conn, "insert_done", rows=json.dumps(carry))
        carried = set(kept)
        # Only terminal history is dropped: a live head was carried forward above.
        dropped = [h for h in heads if h["id"] not in carried and h["state"] in _DROPPED_STATES]
        release = []
        stats: dict[str, list[int]] = {}
        for h in dropped:
            job_state = JobState.parse(h["state"])
            queue = h["queue"]
            writes.counts[(queue, h["state"])] -= 1
            if job_state == JobState.Completed:
                writes.completed(queue, h["finalized_at"], -1)
            if h["unique_key"] is not None:
                mask = (
                    DEFAULT_UNIQUE_STATES
                    if h["unique_states"] is None
                    else bitstring_to_mask(h["unique_states"])
                )
                if mask_contains(mask, job_state):
                    release.append((h["unique_key"], h["id"]))
            entry = stats.setdefault(queue, [0, 0, 0])
            entry[(JobState.Completed, JobState.Cancelled, JobState.Failed).index(job_state)] += 1
        await self._release_keys(conn, release)
        for queue, (done, cancelled, failed) in sorted(stats.items()):
            await self._sql.rows(
                conn,
                self._sql["add_prune_stats"],
                {"queue": queue, "completed": done, "cancelled": cancelled, "failed": failed},
            )
        # The counters go before the lock (prune's buckets are not the hot path's), so
        # the lock is held for two round trips: lock + check + swap, then COMMIT.
        await self._flush(conn, writes)
        # Under the lock every transaction that wrote to the slot has ended: equal counts
        # mean no row arrived after the live check and the read above (the slot's tables
        # are append-only).
        changed: list[sql.Composable] = [
            self._sql.fragment("count_changed", child=self._child(t, target), n=sql.Literal(n))
            for t, n in zip(RING_TABLES, seen, strict=True)
        ]
        # Partitions that were empty stay (usually tombstones and done_entries): less
        # catalog work under the lock, and fewer cached plans invalidated everywhere.
        await self._lock_and_swap(
            conn,
            target,
            RING_TABLES,
            unless=changed,
            swap=tuple(t for t, n in zip(RING_TABLES, seen, strict=True) if n),
            also=self._repoint(carried_claims, target, current),
        )
        return "pruned"

    async def _slot_row_counts(self, conn: DictConnection, slot: int) -> tuple[int, ...]:
        row = await self._one(conn, self._sql.for_slot("slot_row_counts", slot))
        assert row is not None
        return tuple(int(row[t]) for t in RING_TABLES)

    async def _lock_briefly(
        self, conn: DictConnection, tables: sql.Composable, then: sql.Composable
    ) -> None:
        """Take ACCESS EXCLUSIVE on ``tables`` and run ``then`` in the same round trip,
        without making claims queue behind the request: NOWAIT tries first (each in a
        savepoint), then one bounded wait. A lock request that waits makes every later
        reader of the table wait behind it, and claims read every slot. Raises _Blocked on
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
            raise _Blocked() from exc

    async def _slot_is_live(self, conn: DictConnection, slot: int) -> bool:
        """Does ``slot`` hold live work (``slot_is_live``)?"""
        row = await self._one(conn, self._sql["slot_is_live"], {"slot": slot})
        return bool(row and row["live"])

    async def _heads_in_slot(
        self, conn: DictConnection, slot: int, ids: Sequence[int]
    ) -> list[Resolved]:
        """Those of ``ids`` whose current snapshot is a fact stored in ``slot``, whole."""
        rows = await self._sql.rows(
            conn, self._sql["heads_in_slot"], {"slot": slot, "ids": list(ids)}
        )
        return [Resolved.from_row(row) for row in rows]

    async def _head_states_in_slot(
        self, conn: DictConnection, slot: int, live: frozenset[int] = frozenset()
    ) -> list[dict[str, Any]]:
        """The same jobs, only what prune needs to drop one: id, queue, state (its SQL
        name), finalized_at and the unique key with its state mask (bit(8) text).

        Resolving them through ``jobs_resolved`` planned every partition of the ring
        (about 10 ms of the server's CPU at each prune, and the swap before made every
        plan stale). Instead the slot's facts are resolved from its own partitions, as
        ``job_facts`` does; only jobs with a fact outside the slot (an operator's retry
        or deletion marker, a deferred retry) are resolved through the view."""
        facts = await self._sql.rows(conn, self._sql.for_slot("slot_heads", slot))
        # ``live``: jobs just carried forward, whose copies would send them through the
        # view below; their head is live, so prune keeps them whatever it resolves to.
        heads = [row for row in facts if row["state"] is not None and row["id"] not in live]
        if not heads:
            return []
        found = await self._sql.rows(
            conn, self._sql["facts_elsewhere"], {"slot": slot, "ids": [h["id"] for h in heads]}
        )
        elsewhere = [row["job_id"] for row in found]
        if not elsewhere:
            return heads
        moved = set(elsewhere)
        again = await self._sql.rows(
            conn, self._sql["head_states_in_slot"], {"slot": slot, "ids": elsewhere}
        )
        resolved = [h for h in heads if h["id"] not in moved] + again
        return sorted(resolved, key=lambda h: int(h["id"]))

    # ---------------------------------------------------------------- lease ring
    async def _dirty_lease_slots(self, conn: DictConnection, count: int) -> set[int]:
        """Lease slots written since their last TRUNCATE. Rows moved out of a slot or
        updated in place leave dead versions behind: a slot is reclaimed, and entered
        again, only once it is physically empty, so those die with the TRUNCATE."""
        rows = await self._sql.rows(
            conn, self._sql["dirty_lease_slots"], {"n": count, "s": self._sql.quoted_schema}
        )
        return {int(row["i"]) for row in rows}

    def _lease_live(self, slot: int) -> sql.Composable:
        """Does ``slot`` hold the lease of an attempt whose claim is still open?"""
        return sql.SQL(self._sql.for_slot("lease_slot_live", slot).decode())

    async def _lease_slot_is_live(self, conn: DictConnection, slot: int) -> bool:
        row = await self._one(conn, self._sql.for_slot("lease_slot_is_live", slot))
        return bool(row and row["live"])

    async def rotate_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: seal the current lease slot and
        send lease writes to the next one.

        Returns ``rotated``, ``skipped_idle`` (every lease slot is empty),
        ``skipped_busy`` (the next slot still holds rows) or ``skipped_locked``. The ring
        keeps turning while any slot holds rows, even with no new writes, so prune reaches
        every slot and an idle ring ends up empty.
        """
        async with translated_errors(), self._tx() as conn:
            state = await self._one(conn, self._sql["lock_lease_ring_state"])
            if state is None:
                return "skipped_locked"
            current, count = int(state["current_lease_slot"]), int(state["lease_slot_count"])
            incoming = (current + 1) % count
            dirty = await self._dirty_lease_slots(conn, count)
            if incoming == current or not dirty:
                return "skipped_idle"
            if incoming in dirty:
                return "skipped_busy"
            await self._sql.rows(
                conn, self._sql["advance_lease_ring"], {"slot": incoming, "now": self._clock.now()}
            )
        return "rotated"

    async def prune_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: truncate the oldest lease slot
        (the one the next lease rotation enters) once it holds no live lease.

        Returns ``pruned``, ``idle`` (that slot is empty), ``blocked`` (a live lease, or a
        lock held by a running transaction) or ``skipped_locked``.
        """
        try:
            async with translated_errors(), self._conn() as conn:
                state = await self._one(conn, self._sql["read_ring_state"])
                assert state is not None
                count = int(state["lease_slot_count"])
                dirty = await self._dirty_lease_slots(conn, count)
                target = (int(state["current_lease_slot"]) + 1) % count
            async with translated_errors():
                await self._clear_spares(("leases",))
                if target in dirty:
                    await self._prepare_spares(target, ("leases",))
            async with translated_errors(), self._tx() as conn:
                return await self._prune_leases(conn)
        except _Blocked:
            return "blocked"

    async def _prune_leases(self, conn: DictConnection) -> str:
        state = await self._one(conn, self._sql["lock_lease_ring_state"])
        if state is None:
            return "skipped_locked"
        current, count = int(state["current_lease_slot"]), int(state["lease_slot_count"])
        target = (current + 1) % count
        if target == current or target not in await self._dirty_lease_slots(conn, count):
            return "idle"
        # The leases of open attempts move into the current lease slot first (under their
        # advisory locks, taken without waiting), so a callback wait never pins the ring.
        if not await self._carry_live_leases(conn, target, current):
            return "blocked"
        # Re-checked under the lock: a heartbeat that wrote a row in from a stale slot
        # number has committed; no lease writer can reach the slot until the swap commits.
        await self._lock_and_swap(conn, target, ("leases",), unless=[self._lease_live(target)])
        return "pruned"

    async def pruned_counts(self) -> dict[str, dict[str, int]]:
        """Per queue: terminal jobs dropped by prune (``completed``, ``cancelled``,
        ``failed``; the last is ``pruned_failed_count``)."""
        async with translated_errors(), self._tx() as conn:
            rows = await self._sql.rows(conn, self._sql["prune_stats"])
        return {
            row["queue"]: {
                "completed": int(row["pruned_completed"]),
                "cancelled": int(row["pruned_cancelled"]),
                "failed": int(row["pruned_failed"]),
            }
            for row in rows
        }


__all__ = ["RingOps", "psycopg"]
