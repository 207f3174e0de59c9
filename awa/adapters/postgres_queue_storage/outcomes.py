"""Outcomes of a live attempt other than completion: retry, snooze, fail, release,
cancel, progress and heartbeats.

Each is a guarded change of one attempt (:meth:`Outcomes.guarded`): read the job under
the attempt's run lease, decide its next snapshot, and either write the attempt's lease
row (it stays live) or close the receipt and append the new snapshot where its state
lives, all in one transaction that reports ``STALE`` and writes nothing when the attempt
changed underneath.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.admin_changes import AdminChanges
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.receipts import ReceiptCache
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain import lifecycle
from awa.domain.job import JobRecord, RunLease
from awa.domain.kind_policies import Effect, KindPolicies
from awa.domain.lifecycle import AttemptFacts, Transition
from awa.domain.policies import Backoff
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack

RUNNING_ONLY = lifecycle.HANDLER_STATES

#: ``decide(job, writes) -> (next snapshot or None to delete, DLQ reason or None)``.
Decide = Callable[[JobRecord, Writes], tuple[JobRecord | None, str | None]]


class Stale(Exception):
    """The attempt changed underneath: roll the transaction back and report stale."""


def take(transition: Transition, job: JobRecord) -> tuple[JobRecord, str | None]:
    """The snapshot a lifecycle transition leaves ``job`` in and the DLQ reason it routes
    to; an attempt in a state the transition does not apply to is stale."""
    if not transition.applies(job.state):
        raise Stale()
    reason = transition.dlq_reason
    return transition.apply(job), None if reason is None else reason.value


class Outcomes:
    """Guarded changes of one live attempt, and the outcomes built on them."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        receipts: ReceiptCache,
        changes: AdminChanges,
        clock: Clock,
        backoff: Backoff,
        policies: KindPolicies,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._receipts = receipts
        self._changes = changes
        self._clock = clock
        self._backoff = backoff
        self.policies = policies
        # Queues with a DLQ (read again before each outcome that may fail a job).
        self._dlq_queues: frozenset[str] = frozenset()

    async def _live_op(
        self,
        lease: RunLease,
        decide: Decide,
        states: frozenset[JobState] = LIVE_STATES,
    ) -> Ack:
        """Guarded change of one live attempt: ``decide`` returns the next snapshot and,
        when the job goes to the DLQ, the reason."""
        self._receipts.forget(lease)
        async with translated_errors(), self._connections.tx() as conn:
            # The attempt's lease lock first, before this transaction reads any partition
            # of the rings: a ring prune holds the lock of the attempts it carries while it
            # asks for ACCESS EXCLUSIVE on a partition, and a reader that waited for the
            # lock while holding that partition closed a cycle (a deadlock reported to the
            # reader when its deadlock_timeout ran out during prune's bounded wait).
            await self._sql.exec(conn, "lock_leases", schema=self._sql.schema, ids=[lease.job_id])
            writes = Writes(self._clock.now())
            found = (await self._facts.resolve(conn, [lease.job_id])).get(lease.job_id)
            if not await self._apply(conn, writes, lease, found, decide, states):
                return Ack.STALE
            await self._facts.flush(conn, writes)
        return Ack.APPLIED

    async def _apply(
        self,
        conn: DictConnection,
        writes: Writes,
        lease: RunLease,
        found: Resolved | None,
        decide: Decide,
        states: frozenset[JobState],
    ) -> bool:
        """The guarded change of one attempt in the caller's transaction, its lease lock
        held: false (nothing written) when the attempt is no longer the live ``lease`` in
        ``states``; raises :class:`Stale` when a write found it changed (the caller rolls
        back what was written)."""
        if (
            found is None
            or not found.open_claim
            or found.job.run_lease != lease.lease
            or found.job.state not in states
        ):
            return False
        new, dlq_reason = decide(found.job, writes)
        if new is not None and new.state in LIVE_STATES:
            applied = await self._save_lease(conn, found, new)
            if applied:
                writes.move(found.job, new)
                # A live state can still leave or enter the key's mask (parking on a
                # callback leaves the default one; resuming enters it again).
                await self._facts.unique(conn, [(found.job, new)])
        else:
            applied = await self._facts.transition(conn, writes, found, new, dlq_reason=dlq_reason)
        if not applied:
            # Raising rolls back whatever this transaction wrote so far.
            raise Stale()
        if new is not None and lifecycle.ended_attempt(found.job.state, new.state):
            await self.apply_effects(conn, writes, new)
        return True

    async def guarded_batch(
        self,
        leases: Sequence[RunLease],
        decide: Decide,
        states: frozenset[JobState] = LIVE_STATES,
    ) -> list[Ack]:
        """:meth:`guarded` for many attempts in one transaction (a sweep's batch): their
        lease locks in one statement (job id order), their snapshots in one read, each
        change in a savepoint of its own, so an attempt that changed underneath is rolled
        back alone and reported ``STALE``; the counters are written once, last. One Ack
        per lease, in the order given."""
        if not leases:
            return []
        for lease in leases:
            self._receipts.forget(lease)
        acks: dict[RunLease, Ack] = {}
        async with translated_errors(), self._connections.tx() as conn:
            ids = sorted({lease.job_id for lease in leases})
            await self._sql.exec(conn, "lock_leases", schema=self._sql.schema, ids=ids)
            writes = Writes(self._clock.now())
            found = await self._facts.resolve(conn, ids)
            for lease in sorted(leases, key=lambda x: (x.job_id, x.lease)):
                own = Writes(writes.now)
                try:
                    async with conn.transaction():
                        applied = await self._apply(
                            conn, own, lease, found.get(lease.job_id), decide, states
                        )
                except Stale:
                    applied = False
                acks[lease] = Ack.APPLIED if applied else Ack.STALE
                if applied:
                    writes.absorb(own)
            await self._facts.flush(conn, writes)
        return [acks[lease] for lease in leases]

    async def apply_effects(
        self, conn: DictConnection, writes: Writes, job: JobRecord, *, dependents: bool = True
    ) -> None:
        """The effects on other jobs of the attempt's end that left ``job`` as it is,
        applied in the caller's transaction (a job each effect's transition does not apply
        to, or that is gone, is left alone)."""
        changes = (
            *lifecycle.effects(self.policies, job),
            # The children waiting on the job, if it finished (ADR 0032).
            *(
                await pg_dependencies.finished(conn, [(job.id, job.state)], writes.now)
                if dependents
                else ()
            ),
        )
        await self.change_jobs(conn, writes, changes)

    async def change_jobs(
        self, conn: DictConnection, writes: Writes, changes: Sequence[Effect]
    ) -> None:
        """Apply effects on other jobs in the caller's transaction."""
        await self._changes.change_all(conn, writes, changes)

    def rescue_transition(
        self, kind: lifecycle.Rescue, job: JobRecord, now: datetime
    ) -> Transition:
        """The lifecycle's rescue of ``job``'s attempt by the sweep ``kind``."""
        return lifecycle.rescue(
            kind, self.attempt_facts(job), now=now, backoff=self._backoff, policies=self.policies
        )

    async def guarded(
        self,
        lease: RunLease,
        decide: Decide,
        states: frozenset[JobState] = LIVE_STATES,
    ) -> Ack:
        """Apply ``decide`` to the attempt ``lease`` if it is still live and in ``states``;
        ``STALE`` (nothing written) otherwise, or when ``decide`` raises :class:`Stale`."""
        try:
            return await self._live_op(lease, decide, states)
        except Stale:
            return Ack.STALE

    async def _save_lease(self, conn: DictConnection, found: Resolved, new: JobRecord) -> bool:
        """Write the mutable part of a live attempt into its lease row (in the current
        lease slot); false when the claim closed meanwhile."""
        assert found.ready_slot is not None and found.claim_id is not None
        (locked,) = await self._sql.exec(conn, "lock_leases", schema=self._sql.schema, ids=[new.id])
        rows = await self._sql.exec(
            conn,
            "save_lease",
            slot=locked["lease_slot"],
            job_id=new.id,
            claim_slot=found.ready_slot,
            claim_id=found.claim_id,
            waiting=new.state == JobState.WaitingExternal,
            heartbeat_at=new.heartbeat_at,
            progress=None if new.progress is None else json.dumps(new.progress),
            metadata=json.dumps(new.metadata),
            callback_id=new.callback_id,
            callback_timeout_at=new.callback_timeout_at,
            deadline_at=new.deadline_at,
        )
        return bool(rows)

    def attempt_facts(self, job: JobRecord) -> AttemptFacts:
        """What the lifecycle needs to know of ``job``'s attempt (its queue's DLQ setting
        as last read by :meth:`refresh_dlq`)."""
        return AttemptFacts.of(job, dlq_enabled=job.queue in self._dlq_queues)

    async def refresh_dlq(self) -> None:
        async with self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_queues")
            self._dlq_queues = frozenset(row["queue"] for row in rows)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        await self.refresh_dlq()
        return await self.guarded(
            lease,
            lambda job, w: take(
                lifecycle.retry(
                    self.attempt_facts(job),
                    error=error,
                    now=w.now,
                    backoff=self._backoff,
                    policies=self.policies,
                    delay=delay,
                ),
                job,
            ),
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self.guarded(
            lease, lambda job, w: take(lifecycle.snooze(delay=delay, now=w.now), job)
        )

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self.guarded(lease, lambda job, w: take(lifecycle.cancel(w.now), job))

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        await self.refresh_dlq()
        return await self.guarded(
            lease,
            lambda job, w: take(
                lifecycle.fail(self.attempt_facts(job), error=error, now=w.now), job
            ),
        )

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        return await self.guarded(
            lease,
            lambda job, w: take(
                lifecycle.release(self.attempt_facts(job), error=error, now=w.now), job
            ),
        )

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        if not leases:
            return []
        ids = [lease.job_id for lease in leases]
        async with translated_errors():
            # Two round trips: BEGIN with the lease locks (their slot read), then the
            # heartbeat with COMMIT, its rows read once the pipeline synced.
            async with self._connections.tx(pipeline=True) as conn:
                (locked,) = await self._sql.exec(
                    conn, "lock_leases", schema=self._sql.schema, ids=ids
                )
                cur = await self._sql.send(
                    conn,
                    "heartbeat",
                    slot=locked["lease_slot"],
                    now=self._clock.now(),
                    ids=[lease.job_id for lease in leases],
                    leases=[lease.lease for lease in leases],
                )
            rows = await self._sql.read("heartbeat", cur)
        alive = {(r["job_id"], r["run_lease"]) for r in rows}
        return [
            Ack.APPLIED if (lease.job_id, lease.lease) in alive else Ack.STALE for lease in leases
        ]

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        return await self.guarded(
            lease,
            lambda job, w: (
                attrs.evolve(
                    job,
                    progress=job.progress if progress is None else dict(progress),
                    metadata={**job.metadata, **(metadata_updates or {})},
                    heartbeat_at=w.now,
                ),
                None,
            ),
        )
