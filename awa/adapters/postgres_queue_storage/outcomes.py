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
from datetime import timedelta
from typing import Any

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.receipts import ReceiptCache
from awa.adapters.postgres_queue_storage.snapshots import LIVE_STATES, Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain.job import JobRecord, RunLease, error_entry
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack

RUNNING_ONLY = frozenset({JobState.Running})

#: ``decide(job, writes) -> (next snapshot or None to delete, DLQ reason or None)``.
Decide = Callable[[JobRecord, Writes], tuple[JobRecord | None, str | None]]


class Stale(Exception):
    """The attempt changed underneath: roll the transaction back and report stale."""


class Outcomes:
    """Guarded changes of one live attempt, and the outcomes built on them."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        receipts: ReceiptCache,
        clock: Clock,
        backoff: Backoff,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._receipts = receipts
        self._clock = clock
        self._backoff = backoff
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
            writes = Writes(self._clock.now())
            found = (await self._facts.resolve(conn, [lease.job_id])).get(lease.job_id)
            if (
                found is None
                or not found.open_claim
                or found.job.run_lease != lease.lease
                or found.job.state not in states
            ):
                return Ack.STALE
            new, dlq_reason = decide(found.job, writes)
            if new is not None and new.state in LIVE_STATES:
                applied = await self._save_lease(conn, found, new)
                if applied:
                    writes.move(found.job, new)
            else:
                applied = await self._facts.transition(
                    conn, writes, found, new, dlq_reason=dlq_reason
                )
            if not applied:
                # Raising rolls back whatever this transaction wrote so far.
                raise Stale()
            await self._facts.flush(conn, writes)
        return Ack.APPLIED

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

    def fail_or_dlq(
        self,
        job: JobRecord,
        writes: Writes,
        errors: tuple[dict[str, Any], ...],
        reason: str,
        **changes: Any,
    ) -> tuple[JobRecord, str | None]:
        failed = attrs.evolve(
            job, state=JobState.Failed, errors=errors, finalized_at=writes.now, **changes
        )
        return failed, (reason if job.queue in self._dlq_queues else None)

    def retry_or_fail(
        self,
        job: JobRecord,
        writes: Writes,
        *,
        error: str,
        delay: timedelta | None,
        dlq_reason: str = "max_attempts_exhausted",
        **changes: Any,
    ) -> tuple[JobRecord, str | None]:
        errors = (*job.errors, error_entry(error, attempt=job.attempt, at=writes.now))
        if job.attempt >= job.max_attempts:
            return self.fail_or_dlq(job, writes, errors, dlq_reason, **changes)
        wait = delay if delay is not None else self._backoff.delay(job.attempt)
        return (
            attrs.evolve(
                job,
                state=JobState.Retryable,
                errors=errors,
                run_at=writes.now + wait,
                **changes,
            ),
            None,
        )

    async def refresh_dlq(self) -> None:
        async with self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "dlq_queues")
            self._dlq_queues = frozenset(row["queue"] for row in rows)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        await self.refresh_dlq()
        return await self.guarded(
            lease, lambda job, w: self.retry_or_fail(job, w, error=error, delay=delay)
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self.guarded(
            lease,
            lambda job, w: (
                attrs.evolve(
                    job, state=JobState.Scheduled, run_at=w.now + delay, attempt=job.attempt - 1
                ),
                None,
            ),
            # A parked attempt has no handler left to snooze it.
            RUNNING_ONLY,
        )

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self.guarded(
            lease,
            lambda job, w: (
                attrs.evolve(job, state=JobState.Cancelled, finalized_at=w.now),
                None,
            ),
        )

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        await self.refresh_dlq()

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            entry = error_entry(error, attempt=job.attempt, at=w.now, terminal=True)
            return self.fail_or_dlq(job, w, (*job.errors, entry), "terminal_error")

        return await self.guarded(lease, decide)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            entry = error_entry(error, attempt=job.attempt, at=w.now)
            return (
                attrs.evolve(
                    job,
                    state=JobState.Retryable,
                    run_at=w.now,
                    attempt=job.attempt - 1,
                    errors=(*job.errors, entry),
                ),
                None,
            )

        return await self.guarded(lease, decide)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        if not leases:
            return []
        ids = [lease.job_id for lease in leases]
        async with translated_errors(), self._connections.tx(pipeline=True) as conn:
            (locked,) = await self._sql.exec(conn, "lock_leases", schema=self._sql.schema, ids=ids)
            rows = await self._sql.exec(
                conn,
                "heartbeat",
                slot=locked["lease_slot"],
                now=self._clock.now(),
                ids=[lease.job_id for lease in leases],
                leases=[lease.lease for lease in leases],
            )
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
