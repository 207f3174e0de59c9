"""Maintenance sweeps over jobs: promotion of due deferred jobs and the rescues
(stale heartbeat, expired deadline, expired callback), each rescue a guarded change of
the attempt it finds (:meth:`~.outcomes.Outcomes.guarded`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.outcomes import Outcomes, take
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain.job import JobRecord, RunLease
from awa.domain.lifecycle import Rescue
from awa.domain.states import JobState
from awa.ports.clock import Clock
from awa.ports.storage import Ack, Rescued

#: How many attempts one rescue batch reads and changes in one transaction.
RESCUE_BATCH = 256
#: How many batches one sweep call rescues at most.
RESCUE_ROUNDS = 8


class Sweeps:
    """``promote_due`` and the ``rescue_*`` sweeps."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        outcomes: Outcomes,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._outcomes = outcomes
        self._clock = clock

    async def promote_due(self, *, limit: int = 4096) -> int:
        if limit <= 0:
            return 0
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._sql.exec(conn, "due_deferred", now=writes.now, limit=limit)
            if not rows:
                return 0
            rows.sort(key=lambda r: (r["run_at"], r["job_id"]))
            items = []
            changes = []
            for row in rows:
                before = Resolved.from_row(
                    {
                        **row,
                        "id": row["job_id"],
                        "ready_slot": None,
                        "ready_fact": None,
                        "claim_id": None,
                        "open_claim": False,
                    }
                )
                after = attrs.evolve(before.job, state=JobState.Available)
                items.append((after, before.ordering_key))
                changes.append((before.job, after))
                writes.move(before.job, after)
            await self._facts.unique(conn, changes)
            await self._facts.place(conn, items)
            await self._facts.flush(conn, writes)
        return len(rows)

    async def _rescue(self, query: str, kind: Rescue, **params: Any) -> list[Rescued]:
        """The attempts ``query`` finds, rescued ``RESCUE_BATCH`` at a time: each batch is
        read by one statement and changed in one transaction (:meth:`Outcomes.guarded_batch`,
        the run-lease guard per attempt). At most ``RESCUE_ROUNDS`` batches per call; the
        next sweep takes the rest."""
        await self._outcomes.refresh_dlq()
        rescued: list[Rescued] = []
        # What each attempt's rescue decided, by job id (read back for its report).
        decided: dict[int, tuple[JobRecord, str | None]] = {}

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            new, dlq = take(self._outcomes.rescue_transition(kind, job, w.now), job)
            decided[job.id] = (new, dlq)
            return new, dlq

        for _ in range(RESCUE_ROUNDS):
            async with translated_errors(), self._connections.tx() as conn:
                rows = await self._sql.exec(conn, query, limit=RESCUE_BATCH, **params)
            leases = [RunLease(row["job_id"], row["run_lease"]) for row in rows]
            acks = await self._outcomes.guarded_batch(leases, decide, kind.applies_to)
            applied = 0
            for lease, ack in zip(leases, acks, strict=True):
                if ack is not Ack.APPLIED:
                    continue
                applied += 1
                new, dlq = decided[lease.job_id]
                rescued.append(
                    Rescued(
                        lease=lease,
                        new_state=new.state,
                        reason=kind.error,
                        dlq_reason=dlq,
                        queue=new.queue,
                        kind=new.kind,
                    )
                )
            # A short batch was the last; a batch with nothing applied would be found again.
            if len(rows) < RESCUE_BATCH or applied == 0:
                break
        return rescued

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        return await self._rescue(
            "stale_heartbeats", Rescue.HEARTBEAT_STALE, cutoff=self._clock.now() - staleness
        )

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        return await self._rescue(
            "expired_deadlines", Rescue.DEADLINE_EXCEEDED, now=self._clock.now()
        )

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        return await self._rescue(
            "expired_callbacks", Rescue.CALLBACK_TIMEOUT, now=self._clock.now()
        )
