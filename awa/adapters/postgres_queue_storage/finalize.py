"""Completion: a successful attempt appends a closure.

An attempt this engine claimed, without a unique key, is closed by its receipt key in one
statement on a kept connection (``complete_in_slot_counted`` on the partitions of the one
slot its receipts name, else ``complete_receipts_counted`` over the ring; each has an
``_arbitrated`` form for when a racing finaliser's closure failed it). The same statement
satisfies the completed jobs' dependency edges (``awa.satisfy_dependencies``); only a
completion that releases a waiting job is sent again in a transaction that applies the
release (ADR 0032, "The drain"). Every other
completion is looked up by job id (``complete_short``, or the snapshots, ``close_claims``
and a done row for attempts with a lease or a unique key).

While a kind of the process has an effect rule (``KindPolicies.has_effects``), every
completion is looked up by job id: the lookup's transaction reads the completed jobs
and applies their effects on other jobs before it commits (ADR 0028).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.arrays import Int8s
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.outcomes import Outcomes
from awa.adapters.postgres_queue_storage.receipts import ReceiptCache
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes, minute_of
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain import lifecycle
from awa.domain.job import JobRecord, RunLease
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack

#: Completion by receipt, over the ring and in one slot: the statement, then the form that
#: lets the closure key decide after a racing finaliser's closure failed it.
_RING_WIDE = ("complete_receipts_counted", "complete_receipts_arbitrated")
_IN_SLOT = ("complete_in_slot_counted", "complete_in_slot_arbitrated")


class Completion:
    """``complete``."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        receipts: ReceiptCache,
        outcomes: Outcomes,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._receipts = receipts
        self._outcomes = outcomes
        self._clock = clock

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        if not leases:
            return []
        known = self._receipts.take(leases)
        if not known or self._outcomes.policies.has_effects:
            # The receipt statement commits on its own and reads no job: completions that
            # may carry effects take the lookup's transaction.
            return await self._complete_by_lookup(leases)
        now = self._clock.now()
        keys = list(known)
        slots = [known[k][0] for k in keys]
        params = {
            "now": now,
            "minute": minute_of(now),
            "ids": Int8s(k[0] for k in keys),
            "leases": Int8s(k[1] for k in keys),
            "slots": Int8s(slots),
            "claims": Int8s(known[k][1] for k in keys),
            "queues": [known[k][2] for k in keys],
        }
        # One statement on its own: closures, counters and completion buckets. A closure
        # committed by a racing finaliser meanwhile fails it on the closure key (nothing
        # was written); the arbitrated form then lets the key decide. Receipts of one slot
        # (the common case) are closed by that slot's own statement.
        one_slot = slots[0] if len(set(slots)) == 1 else None
        async with translated_errors(), self._connections.kept_conn("complete") as conn:
            try:
                rows = await self._close_receipts(conn, one_slot, params)
            except psycopg.errors.UndefinedTable:
                if one_slot is None:
                    raise
                # A receipt from before the ring was installed again with fewer slots.
                rows = await self._close_receipts(conn, None, params)
        closed = {r["claim_id"] for r in rows if r["claim_id"] is not None}
        acks: dict[tuple[int, int], Ack] = {}
        for key, (_, claim_id, _queue) in known.items():
            if claim_id in closed:
                acks[key] = Ack.APPLIED
        # A receipt that closed nothing is looked up by job id: its attempt may have a
        # lease, or prune may have carried it into another slot (ADR 0006,
        # "Carry-forward of live rows"); a finalised one is STALE there too.
        rest = [lease for lease in leases if (lease.job_id, lease.lease) not in acks]
        by_lookup = iter(await self._complete_by_lookup(rest)) if rest else iter(())
        out: list[Ack] = []
        answered: set[tuple[int, int]] = set()
        for lease in leases:
            key = (lease.job_id, lease.lease)
            if key in acks:
                # A lease listed twice is applied once; the repeat is stale.
                out.append(acks[key] if key not in answered else Ack.STALE)
                answered.add(key)
            else:
                out.append(next(by_lookup))
        return out

    async def _close_receipts(
        self,
        conn: DictConnection,
        slot: int | None,
        params: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """Close receipts on ``slot``'s own partitions, or over the ring when ``slot`` is
        ``None``, with the completed jobs' dependency edges, in one statement on its own.
        Two failures write nothing and send it again: a racing finaliser's closure (the
        arbitrated form lets the closure key decide) and a completion that releases a
        waiting job (``AWD01``: in a transaction that applies the release, ADR 0032)."""
        counted, arbitrated = _RING_WIDE if slot is None else _IN_SLOT
        name, in_transaction = counted, False
        while True:
            statement = self._sql[name] if slot is None else self._sql.for_slot(name, slot)
            try:
                if not in_transaction:
                    return await self._sql.run_generic(
                        conn, statement, {**params, "release": False}
                    )
                return await self._close_and_release(conn, statement, params)
            except psycopg.errors.UniqueViolation:
                if name == arbitrated:
                    raise
                name = arbitrated
            except psycopg.Error as exc:
                if in_transaction or not pg_dependencies.needs_transaction(exc):
                    raise
                in_transaction = True

    async def _close_and_release(
        self, conn: DictConnection, statement: bytes, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The receipt statement in a transaction that also releases the children whose
        last parent it completed (a failure rolls all of it back)."""
        async with conn.transaction():
            rows = await self._sql.run_generic(conn, statement, {**params, "release": True})
            children = [r["released"] for r in rows if r["released"] is not None]
            if children:
                # The receipt statement ran under its generic plan; the release reads
                # and writes the children by job id, planned for the ids at hand.
                await self._sql.exec(conn, "default_plans_here")
                writes = Writes(params["now"])
                changes = pg_dependencies.released(children, writes.now)
                await self._outcomes.change_jobs(conn, writes, changes)
                await self._facts.flush(conn, writes)
        return rows

    async def _complete_by_lookup(self, leases: Sequence[RunLease]) -> list[Ack]:
        async with translated_errors(), self._connections.tx(pipeline=True) as conn:
            writes = Writes(self._clock.now())
            # Short attempts (no lease, no unique key) are found and closed in one
            # statement; otherwise the snapshots are read before anything is closed.
            open_rows = await self._sql.exec(
                conn,
                "complete_short",
                now=writes.now,
                ids=[lease.job_id for lease in leases],
                leases=[lease.lease for lease in leases],
            )
            by_lease = {(r["job_id"], r["run_lease"]): r for r in open_rows}
            snapshots: dict[int, Resolved] = {}
            if open_rows and open_rows[0]["short"]:
                won = {r["claim_id"] for r in open_rows if r["closed"]}
            else:
                wide = [
                    r["job_id"] for r in open_rows if r["has_lease"] or r["unique_key"] is not None
                ]
                snapshots = await self._facts.resolve(conn, wide) if wide else {}
                order = sorted(by_lease.values(), key=lambda r: (r["slot"], r["claim_id"]))
                closed = await self._sql.exec(
                    conn,
                    "close_claims",
                    now=writes.now,
                    slots=[r["slot"] for r in order],
                    claims=[r["claim_id"] for r in order],
                    queues=[r["queue"] for r in order],
                    outcomes=["moved" if r["has_lease"] else "completed" for r in order],
                )
                won = {r["claim_id"] for r in closed}
            acks: list[Ack] = []
            seen: set[tuple[int, int]] = set()
            done: list[tuple[JobRecord, bytes | None]] = []
            unique_changes = []
            for lease in leases:
                key = (lease.job_id, lease.lease)
                row = by_lease.get(key)
                applied = row is not None and row["claim_id"] in won and key not in seen
                seen.add(key)
                acks.append(Ack.APPLIED if applied else Ack.STALE)
                if not applied or row is None:
                    continue
                before_state = JobState.WaitingExternal if row["waiting"] else JobState.Running
                snap = snapshots.get(lease.job_id)
                if snap is not None:
                    before = snap.job
                    after = lifecycle.complete(writes.now).apply(before)
                    if row["has_lease"]:
                        done.append((after, snap.ordering_key))
                    unique_changes.append((before, after))
                writes.counts[(row["queue"], before_state.sql_name)] -= 1
                writes.counts[(row["queue"], JobState.Completed.sql_name)] += 1
                writes.completed(row["queue"], writes.now, 1)
            if done:
                await self._facts.place(conn, done)
            await self._facts.unique(conn, unique_changes)
            completed = [
                lease.job_id for lease, a in zip(leases, acks, strict=True) if a is Ack.APPLIED
            ]
            await self._release_children(conn, writes, completed)
            if self._outcomes.policies.has_effects:
                await self._apply_effects(conn, writes, leases, acks, snapshots)
            await self._facts.flush(conn, writes)
        return acks

    async def _release_children(
        self, conn: DictConnection, writes: Writes, completed: Sequence[int]
    ) -> None:
        """The children waiting on the jobs this transaction completed (ADR 0032)."""
        done = [(job_id, JobState.Completed) for job_id in completed]
        changes = await pg_dependencies.finished(conn, done, writes.now)
        await self._outcomes.change_jobs(conn, writes, changes)

    async def _apply_effects(
        self,
        conn: DictConnection,
        writes: Writes,
        leases: Sequence[RunLease],
        acks: Sequence[Ack],
        snapshots: dict[int, Resolved],
    ) -> None:
        """The effects of the completions that applied, in this transaction. A short
        attempt's snapshot is read after its claim closed (the completion is this
        transaction's own write); the completed job is the lifecycle's either way."""
        ids = [lease.job_id for lease, a in zip(leases, acks, strict=True) if a is Ack.APPLIED]
        unread = [job_id for job_id in ids if job_id not in snapshots]
        found = {**snapshots, **(await self._facts.resolve(conn, unread) if unread else {})}
        done = lifecycle.complete(writes.now)
        for job_id in ids:
            snap = found.get(job_id)
            if snap is not None:
                await self._outcomes.apply_effects(
                    conn, writes, done.apply(snap.job), dependents=False
                )
