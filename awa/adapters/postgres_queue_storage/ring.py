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
from awa.domain.states import (
    DEFAULT_UNIQUE_STATES,
    JobState,
    bitstring_to_mask,
    mask_contains,
)

log = logging.getLogger("awa.adapters.postgres_queue_storage")

RING_TABLES = ("ready_entries", "claims", "closures", "tombstones", "done_entries")
_HEAD_STATE_COLUMNS = (
    "j.id, j.queue, j.state::text AS state, j.finalized_at, j.unique_key, "
    "j.unique_states::text AS unique_states"
)
DEFAULT_FAILED_RETENTION = timedelta(hours=72)
#: The states of heads prune drops with their slot (live heads are carried forward).
_DROPPED_STATES = frozenset(
    s.sql_name for s in (JobState.Completed, JobState.Cancelled, JobState.Failed)
)
PRUNE_LOCK_TIMEOUT = "50ms"
#: Prune asks for its ACCESS EXCLUSIVE lock with NOWAIT this many times, pausing
#: PRUNE_NOWAIT_PAUSE seconds in between, before it queues for it (at most
#: PRUNE_LOCK_TIMEOUT). A lock request that waits makes every later claim wait behind it,
#: so prune only queues when the slot is never free for a moment.
PRUNE_NOWAIT_TRIES = 25
PRUNE_NOWAIT_PAUSE = 0.002
#: How far back completion buckets are kept (the read window is one hour).
COMPLETIONS_KEPT = timedelta(hours=2)


class _Blocked(Exception):
    """Prune found live work in its slot after taking the lock."""


class RingOps(CarryOps, LongTransactionOps):
    """Rotate the queue ring and truncate its oldest sealed slot."""

    #: Set once the database refuses the partition swap to this role (it needs ownership
    #: of the ring tables); prune then truncates instead, as before, and holds its lock
    #: longer.
    _swap_denied = False
    _unclean: set[str] | None = None
    #: Set once a prune found a slot without its stand-ins (said once per process).
    _spares_missing_said = False

    def _child(self, table: str, slot: int) -> str:
        return f'{self._qschema_name}."{table}_{slot}"'

    @property
    def _qschema_name(self) -> str:
        return '"' + self._schema.replace('"', '""') + '"'

    async def _slot_has_rows(self, conn: DictConnection, slot: int) -> bool:
        probes = " OR ".join(f"EXISTS (SELECT 1 FROM {self._child(t, slot)})" for t in RING_TABLES)
        cur = await conn.execute(f"SELECT {probes} AS busy".encode())
        row = await cur.fetchone()
        return bool(row and row["busy"])

    async def rotate_queue_ring(self) -> str:
        """Seal the current slot and open the next one.

        Returns ``rotated``, ``skipped_idle`` (nothing to seal), ``skipped_busy`` (the next
        slot still holds rows) or ``skipped_locked`` (another rotate / prune is running).
        """
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT current_slot, slot_count FROM {self._qschema_name}.ring_state "
                "FOR UPDATE SKIP LOCKED".encode()
            )
            state = await cur.fetchone()
            if state is None:
                return "skipped_locked"
            current, count = int(state["current_slot"]), int(state["slot_count"])
            incoming = (current + 1) % count
            if not await self._slot_has_rows(conn, current):
                return "skipped_idle"
            if await self._slot_has_rows(conn, incoming):
                return "skipped_busy"
            now = self._clock.now()
            await conn.execute(
                f"UPDATE {self._qschema_name}.ring_state SET current_slot = %s, "
                "generation = generation + 1, rotated_at = %s".encode(),
                (incoming, now),
            )
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
            cur = await conn.execute(
                f"SELECT current_slot, slot_count FROM {self._qschema_name}.ring_state".encode()
            )
            state = await cur.fetchone()
            if state is None:
                return None
            current, count = int(state["current_slot"]), int(state["slot_count"])
            target = (current + 1) % count
            if target == current or not await self._slot_has_rows(conn, target):
                return None
            return target

    def _spare(self, table: str, slot: int) -> str:
        return f'{self._qschema_name}."{table}_{slot}_spare"'

    async def _spares_exist(self, conn: DictConnection, slot: int, tables: tuple[str, ...]) -> bool:
        """Whether the slot's stand-ins for ``tables`` exist. The install builds one for
        every partition (``awa.queue_storage_install_spares``); a schema last installed
        by an older release has none until ``awa migrate`` runs, and prune truncates its
        slots in place meanwhile."""
        cur = await conn.execute(
            b"SELECT bool_and(to_regclass(format('%%s.%%I', %(s)s::text, "
            b"t || '_' || %(k)s || '_spare')) IS NOT NULL) AS ready "
            b"FROM unnest(%(tables)s::text[]) AS t",
            {"tables": list(tables), "s": self._qschema_name, "k": slot},
        )
        row = await cur.fetchone()
        if row is not None and row["ready"]:
            return True
        if not self._spares_missing_said:
            log.warning(
                "queue storage in %s: slot %d has no prebuilt stand-ins to swap in; prune "
                "truncates under its lock instead until `awa migrate` builds them",
                self._schema,
                slot,
            )
            self._spares_missing_said = True
        return False

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
            cur = await conn.execute(
                b"SELECT format('%%s.%%I', %(s)s::text, c.relname) AS spare "
                b"FROM pg_class c "
                b"WHERE c.relnamespace = to_regnamespace(%(s)s) AND c.relkind = 'r' "
                b"  AND c.relname ~ ('^(' || array_to_string(%(tables)s::text[], '|') "
                b"      || ')_[0-9]+_spare$') "
                b"  AND pg_relation_size(c.oid) > 0",
                {"tables": list(tables), "s": self._qschema_name},
            )
            spares = ", ".join(row["spare"] for row in await cur.fetchall())
            if spares:
                try:
                    async with conn.transaction():
                        await conn.execute(
                            f"LOCK TABLE {spares} IN ACCESS EXCLUSIVE MODE NOWAIT; "
                            f"TRUNCATE {spares}".encode()
                        )
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
                "queue storage in %s: this role may not detach and attach partitions; "
                "prune truncates under its lock instead (the owner of the ring tables "
                "swaps partitions and holds the lock for less time)",
                self._schema,
            )
        self._swap_denied = True

    def _swap_steps(self, slot: int, tables: tuple[str, ...], *, swap: bool) -> list[str]:
        """Swap the slot's partitions with their empty stand-ins: the partition goes out
        under the stand-in's name and is emptied later (:meth:`_clear_spares`). Only
        catalog work: nothing is built, synced or dropped under the lock. A TRUNCATE
        instead when ``swap`` is false.

        The stand-ins are built by the install, never here: building an index (even an
        empty one) syncs its file, which is why a TRUNCATE of the ring's tables took 50-150
        ms under its lock. A stand-in is the partition an earlier swap took out, so the
        ring's relations are created once and then only change places: no catalog rows for
        new tables, columns and types every second, and every backend's catalog caches
        stay warm."""
        s = self._qschema_name
        if not swap:
            return [f"TRUNCATE {', '.join(self._child(t, slot) for t in tables)}"] if tables else []
        steps = []
        for table in tables:
            child = self._child(table, slot)
            steps += [
                f"ALTER TABLE {s}.{table} DETACH PARTITION {child}",
                f'ALTER TABLE {child} RENAME TO "{table}_{slot}_out"',
                f'ALTER TABLE {self._spare(table, slot)} RENAME TO "{table}_{slot}"',
                f'ALTER TABLE {s}."{table}_{slot}_out" RENAME TO "{table}_{slot}_spare"',
                f"ALTER TABLE {s}.{table} ATTACH PARTITION {child} FOR VALUES IN ({slot})",
            ]
        return steps

    async def _lock_and_swap(
        self,
        conn: DictConnection,
        slot: int,
        tables: tuple[str, ...],
        unless: str,
        *,
        swap: tuple[str, ...] | None = None,
        also: str | None = None,
    ) -> None:
        """Lock the slot's partitions of ``tables`` (and the ring tables whose partition is
        swapped), check, and swap, in one round trip. ``unless`` is a condition that must be
        false under the lock (else _Blocked); ``swap`` (default: all of ``tables``) are the
        partitions replaced by their empty stand-ins; ``also`` is a statement run under
        the lock after the check."""
        swapped = tables if swap is None else swap

        def plan(swapping: bool) -> tuple[str, str]:
            parents = [f"{self._qschema_name}.{t}" for t in swapped] if swapping else []
            locked = ", ".join(parents + [self._child(t, slot) for t in tables])
            refused = unless
            if parents:
                # a stand-in that could not be emptied yet is never swapped in
                spares = " OR ".join(
                    f"EXISTS (SELECT 1 FROM {self._spare(t, slot)})" for t in swapped
                )
                refused = f"({unless}) OR {spares}"
            check = (
                f"DO $prune$ BEGIN IF {refused} THEN RAISE EXCEPTION 'slot {slot} is in use' "
                "USING ERRCODE = '55000'; END IF; END $prune$"
            )
            steps = [
                check,
                *([also] if also else []),
                *self._swap_steps(slot, swapped, swap=swapping),
            ]
            return locked, "; ".join(steps)

        swapping = (
            bool(swapped)
            and not self._swap_denied
            and await self._spares_exist(conn, slot, swapped)
        )
        # Looked at again on the next turn whatever happens: after a swap the stand-ins
        # hold the rows taken out, and a swap refused for a stand-in that is not empty
        # (another leader's, swapped out just before it lost the lead) needs one emptied.
        self._unclean_spares().update(swapped)
        try:
            await self._lock_briefly(conn, *plan(swapping))
        except pg_errors.InsufficientPrivilege:
            if not swapping:
                raise
            # The refused swap's savepoint is rolled back: this turn truncates instead.
            self._refuse_swap()
            await self._lock_briefly(conn, *plan(False))
        except pg_errors.UndefinedTable as exc:
            # a stand-in was dropped since it was looked for (an install rebuilt it): the
            # next turn finds the new one
            raise _Blocked() from exc

    async def _prune(self, conn: DictConnection, failed_retention: timedelta) -> str:
        s = self._qschema_name
        cur = await conn.execute(
            f"SELECT current_slot, slot_count FROM {s}.ring_state FOR UPDATE SKIP LOCKED".encode()
        )
        state = await cur.fetchone()
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
        cur = await conn.execute(
            b"SELECT pg_try_advisory_xact_lock(%s, hashtext(%s)) AS ok",
            (PRUNE_GATE, self._schema),
        )
        gate = await cur.fetchone()
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
            await conn.execute(
                f"INSERT INTO {s}.queue_prune_stats AS p (queue, pruned_completed, "
                "pruned_cancelled, pruned_failed) VALUES (%s, %s, %s, %s) ON CONFLICT (queue) "
                "DO UPDATE SET pruned_completed = p.pruned_completed + EXCLUDED.pruned_completed,"
                " pruned_cancelled = p.pruned_cancelled + EXCLUDED.pruned_cancelled,"
                " pruned_failed = p.pruned_failed + EXCLUDED.pruned_failed".encode(),
                (queue, done, cancelled, failed),
            )
        # The counters go before the lock (prune's buckets are not the hot path's), so
        # the lock is held for two round trips: lock + check + swap, then COMMIT.
        await self._flush(conn, writes)
        # Under the lock every transaction that wrote to the slot has ended: equal counts
        # mean no row arrived after the live check and the read above (the slot's tables
        # are append-only).
        changed = " OR ".join(
            f"{self._count_sql(t, target)} <> {n}" for t, n in zip(RING_TABLES, seen, strict=True)
        )
        # Partitions that were empty stay (usually tombstones and done_entries): less
        # catalog work under the lock, and fewer cached plans invalidated everywhere.
        await self._lock_and_swap(
            conn,
            target,
            RING_TABLES,
            unless=changed,
            swap=tuple(t for t, n in zip(RING_TABLES, seen, strict=True) if n),
            also=self._repoint_sql(carried_claims, target, current),
        )
        return "pruned"

    def _count_sql(self, table: str, slot: int) -> str:
        return f"(SELECT count(*) FROM {self._child(table, slot)})"

    async def _slot_row_counts(self, conn: DictConnection, slot: int) -> tuple[int, ...]:
        counts = ", ".join(f"{self._count_sql(t, slot)} AS {t}" for t in RING_TABLES)
        cur = await conn.execute(f"SELECT {counts}".encode())
        row = await cur.fetchone()
        assert row is not None
        return tuple(int(row[t]) for t in RING_TABLES)

    async def _lock_briefly(self, conn: DictConnection, tables: str, then: str) -> None:
        """Take ACCESS EXCLUSIVE on ``tables`` and run ``then`` in the same round trip,
        without making claims queue behind the request: NOWAIT tries first (each in a
        savepoint), then one bounded wait. A lock request that waits makes every later
        reader of the table wait behind it, and claims read every slot. Raises _Blocked on
        a timeout, on a deadlock report (a server whose deadlock_timeout is below the lock
        timeout reports the wait that way) and when ``then`` finds rows that arrived in the
        slot since it was read (SQLSTATE 55000)."""
        lock = f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE"
        try:
            for _ in range(PRUNE_NOWAIT_TRIES):
                try:
                    async with conn.transaction():
                        await conn.execute(f"{lock} NOWAIT; {then}".encode())
                    return
                except pg_errors.LockNotAvailable:
                    await anyio.sleep(PRUNE_NOWAIT_PAUSE)
            await conn.execute(f"SET LOCAL lock_timeout = '{PRUNE_LOCK_TIMEOUT}'".encode())
            async with conn.transaction():
                await conn.execute(f"{lock}; {then}".encode())
        except (
            pg_errors.LockNotAvailable,
            pg_errors.DeadlockDetected,
            pg_errors.ObjectNotInPrerequisiteState,
        ) as exc:
            raise _Blocked() from exc

    async def _slot_is_live(self, conn: DictConnection, slot: int) -> bool:
        """Does ``slot`` hold a ready row nobody claimed or tombstoned, or a claim with no
        closure? OFFSET 0 keeps each NOT EXISTS a probe of the other table's key per row:
        with the ring's statistics stale (its tables are never analysed) the planner
        chose a nested loop over a materialised copy of the slot's closures, quadratic in
        the slot's size (about 1 s for 5,000 jobs)."""
        s = self._qschema_name
        cur = await conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM {s}.ready_entries r WHERE r.slot = %(slot)s "
            f"  AND NOT EXISTS (SELECT 1 FROM {s}.claims c "
            "                   WHERE c.slot = r.slot AND c.ready_fact = r.fact_id OFFSET 0) "
            f"  AND NOT EXISTS (SELECT 1 FROM {s}.tombstones t "
            "                   WHERE t.slot = r.slot AND t.ready_fact = r.fact_id OFFSET 0)) "
            f"OR EXISTS (SELECT 1 FROM {s}.claims c WHERE c.slot = %(slot)s "
            f"  AND NOT EXISTS (SELECT 1 FROM {s}.closures x "
            "  WHERE x.slot = c.slot AND x.claim_id = c.claim_id OFFSET 0)) AS live".encode(),
            {"slot": slot},
        )
        row = await cur.fetchone()
        return bool(row and row["live"])

    def _heads_sql(self, columns: str, only: str = "") -> bytes:
        """Jobs whose current snapshot is a fact stored in ``%(slot)s``."""
        s = self._qschema_name
        return (
            f"SELECT {columns} FROM {s}.jobs_resolved j WHERE j.id IN ("
            f"  SELECT job_id FROM {s}.ready_entries WHERE slot = %(slot)s "
            f"  UNION SELECT job_id FROM {s}.done_entries WHERE slot = %(slot)s) "
            "AND (j.ready_slot = %(slot)s OR j.fact_id IN ("
            f"  SELECT fact_id FROM {s}.done_entries WHERE slot = %(slot)s)) {only}"
            "ORDER BY j.id"
        ).encode()

    async def _heads_in_slot(
        self, conn: DictConnection, slot: int, ids: Sequence[int] | None = None
    ) -> list[Resolved]:
        """Jobs whose current snapshot is a fact stored in ``slot`` (only ``ids``, if
        given), whole."""
        only = "" if ids is None else "AND j.id = ANY(%(ids)s::bigint[]) "
        cur = await conn.execute(
            self._heads_sql("j.*", only), {"slot": slot, "ids": None if ids is None else list(ids)}
        )
        return [Resolved.from_row(row) for row in await cur.fetchall()]

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
        facts = await conn.execute(self._slot_heads_sql(slot))
        # ``live``: jobs just carried forward, whose copies would send them through the
        # view below; their head is live, so prune keeps them whatever it resolves to.
        heads = [
            row
            for row in await facts.fetchall()
            if row["state"] is not None and row["id"] not in live
        ]
        if not heads:
            return []
        s = self._qschema_name
        cur = await conn.execute(
            f"SELECT job_id FROM {s}.ready_entries WHERE slot <> %(slot)s "
            "  AND job_id = ANY(%(ids)s::bigint[]) "
            f"UNION SELECT job_id FROM {s}.done_entries WHERE slot <> %(slot)s "
            "  AND job_id = ANY(%(ids)s::bigint[]) "
            f"UNION SELECT job_id FROM {s}.deferred_jobs "
            "  WHERE job_id = ANY(%(ids)s::bigint[])".encode(),
            {"slot": slot, "ids": [h["id"] for h in heads]},
        )
        elsewhere = [row["job_id"] for row in await cur.fetchall()]
        if not elsewhere:
            return heads
        moved = set(elsewhere)
        cur = await conn.execute(
            self._heads_sql(_HEAD_STATE_COLUMNS, "AND j.id = ANY(%(ids)s::bigint[]) "),
            {"slot": slot, "ids": elsewhere},
        )
        resolved = [h for h in heads if h["id"] not in moved] + list(await cur.fetchall())
        return sorted(resolved, key=lambda h: int(h["id"]))

    def _slot_heads_sql(self, slot: int) -> bytes:
        """The latest fact of every job with a fact in ``slot``, among the slot's own
        facts, resolved exactly as the ``job_facts`` view does (a claim, its closure and
        a tombstone live in the slot of the ready row they refer to). ``state`` is NULL
        where the view resolves none (tombstoned, or closed other than completed)."""
        ready, tombstones, claims, closures, done = (
            self._child(t, slot)
            for t in ("ready_entries", "tombstones", "claims", "closures", "done_entries")
        )
        return (
            "SELECT DISTINCT ON (id) id, queue, state, finalized_at, unique_key, unique_states "
            "FROM ("
            "  SELECT r.job_id AS id, r.queue, r.unique_key, r.unique_states::text, "
            "    CASE WHEN t.ready_fact IS NOT NULL THEN NULL "
            "         WHEN c.claim_id IS NULL THEN 'available' "
            "         WHEN x.claim_id IS NULL THEN 'running' "
            "         WHEN x.outcome = 'completed' THEN 'completed' END AS state, "
            "    CASE WHEN x.outcome = 'completed' THEN x.finalized_at "
            "         ELSE r.finalized_at END AS finalized_at, "
            "    greatest(r.fact_id, c.claim_id, x.fact_id, t.fact_id) AS fact_id "
            f"  FROM {ready} r "
            f"  LEFT JOIN {tombstones} t ON t.ready_fact = r.fact_id "
            f"  LEFT JOIN {claims} c ON c.ready_fact = r.fact_id "
            f"  LEFT JOIN {closures} x ON x.claim_id = c.claim_id "
            "  UNION ALL "
            "  SELECT w.job_id, w.queue, w.unique_key, w.unique_states::text, w.state::text, "
            "    w.finalized_at, w.fact_id "
            f"  FROM {done} w"
            ") f ORDER BY id, fact_id DESC"
        ).encode()

    # ---------------------------------------------------------------- lease ring
    async def _dirty_lease_slots(self, conn: DictConnection, count: int) -> set[int]:
        """Lease slots written since their last TRUNCATE. Rows moved out of a slot or
        updated in place leave dead versions behind: a slot is reclaimed, and entered
        again, only once it is physically empty, so those die with the TRUNCATE."""
        cur = await conn.execute(
            b"SELECT i FROM generate_series(0, %(n)s - 1) AS g(i) "
            b"WHERE pg_relation_size(format('%%s.leases_%%s', %(s)s::text, i)::regclass) > 0",
            {"n": count, "s": self._qschema_name},
        )
        return {int(row["i"]) for row in await cur.fetchall()}

    def _lease_live_sql(self, slot: int) -> str:
        """Does ``slot`` hold the lease of an attempt whose claim is still open? Rows of
        closed attempts (or of claims whose queue slot was already reclaimed) are dead."""
        s = self._qschema_name
        return (
            f"EXISTS (SELECT 1 FROM {self._child('leases', slot)} l "
            f"  JOIN {s}.claims c ON c.slot = l.claim_slot AND c.claim_id = l.claim_id "
            f"  WHERE NOT EXISTS (SELECT 1 FROM {s}.closures x "
            "    WHERE x.slot = c.slot AND x.claim_id = c.claim_id))"
        )

    async def _lease_slot_is_live(self, conn: DictConnection, slot: int) -> bool:
        cur = await conn.execute(f"SELECT {self._lease_live_sql(slot)} AS live".encode())
        row = await cur.fetchone()
        return bool(row and row["live"])

    async def rotate_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: seal the current lease slot and
        send lease writes to the next one.

        Returns ``rotated``, ``skipped_idle`` (every lease slot is empty),
        ``skipped_busy`` (the next slot still holds rows) or ``skipped_locked``. The ring
        keeps turning while any slot holds rows, even with no new writes, so prune reaches
        every slot and an idle ring ends up empty.
        """
        s = self._qschema_name
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT current_lease_slot, lease_slot_count FROM {s}.ring_state "
                "FOR UPDATE SKIP LOCKED".encode()
            )
            state = await cur.fetchone()
            if state is None:
                return "skipped_locked"
            current, count = int(state["current_lease_slot"]), int(state["lease_slot_count"])
            incoming = (current + 1) % count
            dirty = await self._dirty_lease_slots(conn, count)
            if incoming == current or not dirty:
                return "skipped_idle"
            if incoming in dirty:
                return "skipped_busy"
            await conn.execute(
                f"UPDATE {s}.ring_state SET current_lease_slot = %s, "
                "lease_generation = lease_generation + 1, lease_rotated_at = %s".encode(),
                (incoming, self._clock.now()),
            )
        return "rotated"

    async def prune_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: truncate the oldest lease slot
        (the one the next lease rotation enters) once it holds no live lease.

        Returns ``pruned``, ``idle`` (that slot is empty), ``blocked`` (a live lease, or a
        lock held by a running transaction) or ``skipped_locked``.
        """
        try:
            async with translated_errors():
                await self._clear_spares(("leases",))
            async with translated_errors(), self._tx() as conn:
                return await self._prune_leases(conn)
        except _Blocked:
            return "blocked"

    async def _prune_leases(self, conn: DictConnection) -> str:
        cur = await conn.execute(
            f"SELECT current_lease_slot, lease_slot_count FROM {self._qschema_name}.ring_state "
            "FOR UPDATE SKIP LOCKED".encode()
        )
        state = await cur.fetchone()
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
        await self._lock_and_swap(conn, target, ("leases",), unless=self._lease_live_sql(target))
        return "pruned"

    async def pruned_counts(self) -> dict[str, dict[str, int]]:
        """Per queue: terminal jobs dropped by prune (``completed``, ``cancelled``,
        ``failed``; the last is ``pruned_failed_count``)."""
        async with translated_errors(), self._tx() as conn:
            cur = await conn.execute(
                f"SELECT * FROM {self._qschema_name}.queue_prune_stats ORDER BY queue".encode()
            )
            rows = await cur.fetchall()
        return {
            row["queue"]: {
                "completed": int(row["pruned_completed"]),
                "cancelled": int(row["pruned_cancelled"]),
                "failed": int(row["pruned_failed"]),
            }
            for row in rows
        }


__all__ = ["RingOps", "psycopg"]
