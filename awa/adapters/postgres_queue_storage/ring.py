"""The queue ring: rotation, and prune of its oldest sealed slot.

Both are meant for the maintenance leader. Each call does at most one step and reports
what happened, so the leader can back off on ``blocked`` / ``skipped_busy``. What is still
live in the slot is carried forward first (:mod:`.carry`); the slot's partitions are then
swapped for empty stand-ins under one short lock (:mod:`.swap`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import anyio
from psycopg import sql

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.carry import Carry, LanesBusy
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.long_tx import LongTransactions
from awa.adapters.postgres_queue_storage.snapshots import (
    PRUNE_GATE,
    PRUNED_COMPLETIONS_BUCKET,
    Resolved,
    Writes,
    minute_of,
    row_json,
)
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.adapters.postgres_queue_storage.swap import RING_TABLES, Blocked, PartitionSwap
from awa.domain.errors import ValidationError
from awa.domain.policies import DEFAULT_CARRY_BATCH, PruneOutcome, RingSeal, RotateOutcome
from awa.domain.states import DEFAULT_UNIQUE_STATES, JobState, bitstring_to_mask, mask_contains
from awa.ports.clock import Clock

DEFAULT_FAILED_RETENTION = timedelta(hours=72)
#: The states of heads prune drops with their slot (live heads are carried forward).
_DROPPED_STATES = frozenset(
    s.sql_name for s in (JobState.Completed, JobState.Cancelled, JobState.Failed)
)
#: Dropped jobs prune counts between two turns it gives the event loop (about 1 ms of work).
_ROWS_PER_TURN = 200
#: How far back completion buckets are kept (the read window is one hour).
COMPLETIONS_KEPT = timedelta(hours=2)


class QueueRing:
    """Rotate the queue ring and reclaim its oldest sealed slot."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        swap: PartitionSwap,
        carry: Carry,
        long_transactions: LongTransactions,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._swap = swap
        self._carry = carry
        self._long = long_transactions
        self._clock = clock
        #: ``_slots_with_rows`` statements, per tuple of slots.
        self._holding: dict[tuple[int, ...], bytes] = {}

    async def _slots_with_rows(self, conn: DictConnection, slots: Sequence[int]) -> set[int]:
        """Those of ``slots`` that hold any row, in one round trip (``slot_has_rows`` for
        each, by name)."""
        key = tuple(slots)
        statement = self._holding.get(key)
        if statement is None:
            parts = [
                self._sql.fragment(
                    "slot_holds_rows",
                    k=sql.Literal(k),
                    query=sql.SQL(self._sql.for_slot("slot_has_rows", k).decode()),
                )
                for k in key
            ]
            joined = sql.SQL(" UNION ALL ").join(parts).as_string()
            statement = self._holding[key] = joined.encode()
        rows = await self._sql.rows(conn, statement)
        return {int(row["slot"]) for row in rows if row["busy"]}

    async def rotate_queue_ring(self, seal: RingSeal | None = None) -> RotateOutcome:
        """Seal the current slot and open the next one; with ``seal``, only once that
        rule says the slot is full or old enough.

        Returns ``rotated``, ``skipped_idle`` (nothing to seal), ``skipped_filling`` (the
        slot is neither full nor old, by ``seal``), ``skipped_busy`` (the next slot still
        holds rows) or ``skipped_locked`` (another rotate / prune is running).
        """
        async with translated_errors(), self._connections.tx() as conn:
            state = await self._sql.one(conn, self._sql["lock_ring_state"])
            if state is None:
                return RotateOutcome.SKIPPED_LOCKED
            current, count = int(state["current_slot"]), int(state["slot_count"])
            incoming = (current + 1) % count
            holding = await self._slots_with_rows(conn, [current, incoming])
            if current not in holding:
                return RotateOutcome.SKIPPED_IDLE
            now = self._clock.now()
            if seal is not None:
                fill = await self._sql.one(
                    conn,
                    self._sql["slot_fill"],
                    {"s": self._sql.quoted_schema, "k": current, "tables": list(RING_TABLES)},
                )
                turned = state["rotated_at"]
                age = None if turned is None else now - turned
                if not seal.due(age=age, size_bytes=int(fill["bytes"])):
                    return RotateOutcome.SKIPPED_FILLING
            if incoming in holding:
                return RotateOutcome.SKIPPED_BUSY
            await self._sql.rows(conn, self._sql["advance_ring"], {"slot": incoming, "now": now})
            # Completion buckets older than the one-hour window are never read again.
            await self._sql.exec(conn, "prune_completions", before=now - COMPLETIONS_KEPT)
        return RotateOutcome.ROTATED

    async def prune_oldest(
        self,
        *,
        failed_retention: timedelta = DEFAULT_FAILED_RETENTION,
        carry_batch: int = DEFAULT_CARRY_BATCH,
    ) -> PruneOutcome:
        """Truncate the oldest sealed slot that holds rows (the one the next rotation
        enters, else the one after it) once nothing live refers to it.

        Returns ``pruned``, ``idle`` (neither slot holds rows), ``blocked`` (live work
        or a lock held by a running transaction), ``skipped_locked`` or ``carried``. Failed
        jobs younger than ``failed_retention`` are carried forward into the current slot
        first. A slot holding more than ``carry_batch`` unclaimed rows is not reclaimed
        in this call: ``carry_batch`` of them are moved into the current slot in a
        transaction of their own (``carried``), and the next call goes on, so no call
        grows with the backlog.
        """
        if isinstance(carry_batch, bool) or not isinstance(carry_batch, int) or carry_batch < 1:
            raise ValidationError(
                "carry_batch", f"must be an integer > 0, got {carry_batch!r}", value=carry_batch
            )
        # The slot this turn chose, set by _prune before anything can block it.
        target: list[int] = []
        try:
            async with translated_errors():
                await self._swap.clear(RING_TABLES)
            async with translated_errors(), self._connections.tx() as conn:
                outcome = await self._prune(conn, failed_retention, target, carry_batch)
        except (Blocked, LanesBusy):
            outcome = PruneOutcome.BLOCKED
        async with translated_errors():
            # Say why reclamation waits (a long transaction holding the slot or the
            # xmin horizon), and compact the control tables once it has ended.
            if outcome == PruneOutcome.BLOCKED and target:
                await self._long.explain_blocked(target[0], RING_TABLES)
            elif outcome == PruneOutcome.PRUNED:
                await self._long.record("queue", "pruned")
            await self._long.watch_horizon()
        return outcome

    async def _oldest_with_rows(self, conn: DictConnection, current: int, count: int) -> int | None:
        """The oldest sealed slot that holds rows, looking at most two slots past the
        current one.

        The slot the next rotation enters comes first: it is the oldest in ring order.
        Once it is empty, the one after it is reclaimed, a whole rotation before the ring
        enters it. A partition swap makes every backend plan again the statements that
        read the swapped slot by name; reclaiming a slot a turn early lets each worker plan
        its claim for that slot before any job waits on it (``Claims``' warm-up, at the
        rotation before). Completed history stays readable for one slot less (about
        ``slot_count - 2`` rotations)."""
        # the next two slots in ring order, neither of them the current one
        ahead = [(current + n) % count for n in (1, 2) if n < count]
        if not ahead:
            return None
        holding = await self._slots_with_rows(conn, ahead)
        return next((k for k in ahead if k in holding), None)

    async def _prune(
        self,
        conn: DictConnection,
        failed_retention: timedelta,
        chosen: list[int],
        carry_batch: int,
    ) -> PruneOutcome:
        state = await self._sql.one(conn, self._sql["lock_ring_state"])
        if state is None:
            return PruneOutcome.SKIPPED_LOCKED
        current, count = int(state["current_slot"]), int(state["slot_count"])
        # Only the oldest slots are reclaimed (the one the next rotation enters, else the
        # one after it): waiting until the ring comes round to them keeps completed history
        # readable for about (slot_count - 2) x rotate interval instead of dropping each
        # slot once sealed.
        target = await self._oldest_with_rows(conn, current, count)
        if target is None:
            return PruneOutcome.IDLE
        chosen.append(target)
        # A backlog is moved out of the slot a bounded step per call, each step its own
        # transaction (this one, holding the ring), until what is left fits in one step;
        # only then is the slot reclaimed below, with that rest copied under the swap.
        if await self._carry.ahead(conn, target, current, carry_batch) is not None:
            return PruneOutcome.CARRIED
        # Everything that takes time happens before the slot is locked, so claims and
        # completions (which read every slot) never queue behind a long prune:
        # - the gate keeps operator changes of terminal jobs out while the slot's jobs are
        #   read and carried forward or dropped;
        # - the slot's row counts, taken first, prove under the lock that nothing was
        #   written to it since (its tables are append-only), so what was read still holds.
        gate = await self._sql.one(
            conn, self._sql["try_prune_gate"], {"gate": PRUNE_GATE, "schema": self._sql.schema}
        )
        if not (gate and gate["ok"]):
            raise Blocked()
        seen = await self._slot_row_counts(conn, target)
        # What is still live in the slot (unclaimed rows, open attempts) is copied into
        # the current slot first; the copies commit with the swap or not at all.
        carried_jobs, carried_claims = await self._carry.live_rows(conn, target, current)
        writes = Writes(self._clock.now())
        floor = writes.now - failed_retention
        # Only what dropping a job needs is read for every head (no args, no metadata):
        # building whole job records for a slot of thousands of jobs took tens of ms of
        # the worker's event loop. Failed jobs that are kept are read whole.
        heads = await self.head_states_in_slot(conn, target, live=carried_jobs)
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
            await self._sql.exec(conn, "insert_done", rows=json.dumps(carry))
        carried = set(kept)
        # Only terminal history is dropped: a live head was carried forward above.
        dropped = [h for h in heads if h["id"] not in carried and h["state"] in _DROPPED_STATES]
        release = []
        stats: dict[str, list[int]] = {}
        pruned_done: Counter[tuple[str, datetime]] = Counter()
        for n, h in enumerate(dropped, 1):
            if n % _ROWS_PER_TURN == 0:
                # The claims and completions of this process wait on the same event loop:
                # a slot holds about a second of jobs (1,000 at 1,000/s), so they get
                # their turn between chunks instead of after all of them.
                await anyio.sleep(0)
            job_state = JobState.parse(h["state"])
            queue = h["queue"]
            writes.counts[(queue, h["state"])] -= 1
            if job_state == JobState.Completed and h["finalized_at"] is not None:
                pruned_done[(queue, minute_of(h["finalized_at"]))] -= 1
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
        await self._facts.release_keys(conn, release)
        for queue, (done, cancelled, failed) in sorted(stats.items()):
            await self._sql.rows(
                conn,
                self._sql["add_prune_stats"],
                {"queue": queue, "completed": done, "cancelled": cancelled, "failed": failed},
            )
        # The counters go before the lock (prune's buckets are not the hot path's), so
        # the lock is held for two round trips: lock + check + swap, then COMMIT.
        await self._facts.flush(conn, writes)
        if pruned_done:
            # Only prune writes this bucket (one leader, under the prune gate), so its
            # rows never wait on the hot path's.
            lost = sorted(pruned_done.items())
            await self._sql.exec(
                conn,
                "add_completions_in",
                queues=[k[0] for k, _ in lost],
                minutes=[k[1] for k, _ in lost],
                deltas=[d for _, d in lost],
                bucket=PRUNED_COMPLETIONS_BUCKET,
            )
        # Under the lock every transaction that wrote to the slot has ended: equal counts
        # mean no row arrived after the live check and the read above (the slot's tables
        # are append-only).
        changed: list[sql.Composable] = [
            self._sql.fragment("count_changed", child=self._swap.child(t, target), n=sql.Literal(n))
            for t, n in zip(RING_TABLES, seen, strict=True)
        ]
        # Partitions that were empty stay (usually tombstones and done_entries): less
        # catalog work under the lock, and fewer cached plans invalidated everywhere.
        await self._swap.lock_and_swap(
            conn,
            target,
            RING_TABLES,
            unless=changed,
            swap=tuple(t for t, n in zip(RING_TABLES, seen, strict=True) if n),
            also=self._carry.repoint(carried_claims, target, current),
        )
        return PruneOutcome.PRUNED

    async def _slot_row_counts(self, conn: DictConnection, slot: int) -> tuple[int, ...]:
        row = await self._sql.one(conn, self._sql.for_slot("slot_row_counts", slot))
        assert row is not None
        return tuple(int(row[t]) for t in RING_TABLES)

    async def _heads_in_slot(
        self, conn: DictConnection, slot: int, ids: Sequence[int]
    ) -> list[Resolved]:
        """Those of ``ids`` whose current snapshot is a fact stored in ``slot``, whole."""
        rows = await self._sql.rows(
            conn, self._sql["heads_in_slot"], {"slot": slot, "ids": list(ids)}
        )
        return [Resolved.from_row(row) for row in rows]

    async def head_states_in_slot(
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

    async def pruned_counts(self) -> dict[str, dict[str, int]]:
        """Per queue: terminal jobs dropped by prune (``completed``, ``cancelled``,
        ``failed``; the last is ``pruned_failed_count``)."""
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.rows(conn, self._sql["prune_stats"])
        return {
            row["queue"]: {
                "completed": int(row["pruned_completed"]),
                "cancelled": int(row["pruned_cancelled"]),
                "failed": int(row["pruned_failed"]),
            }
            for row in rows
        }
