"""Operator changes of jobs: cancel, drain, retry, delete, retention, reset.

Every change is one admin transaction that applies a decision to one job at a time
(:meth:`AdminChanges.change`): read its snapshot, decide, and let
:meth:`~.facts.FactWriter.transition` retire the head fact and append the next one,
re-reading when the head moved underneath.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import attrs

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.lanes import LaneAllocator
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.domain import lifecycle
from awa.domain.channels import cancel_notification
from awa.domain.job import JobRecord
from awa.domain.kind_policies import Effect
from awa.domain.lifecycle import Transition
from awa.domain.policies import RetentionFloor
from awa.domain.states import DEFERRED_STATES, LIVE_STATES, TERMINAL_STATES, JobState
from awa.ports.clock import Clock
from awa.ports.storage import JobFilter, VanishedStep

DRAINABLE_STATES = lifecycle.DRAINABLE_STATES
#: A job whose head fact moved underneath an admin write is re-read this many times.
_RETRIES = 5


def _job_id(found: Resolved) -> int:
    return found.job.id


#: ``decide(job) -> (next snapshot or None to delete, keep it unchanged)``.
AdminDecide = Callable[[JobRecord], tuple[JobRecord | None, bool]]


class AdminChanges:
    """Admin writes; each is one transaction."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        lanes: LaneAllocator,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._lanes = lanes
        self._clock = clock

    async def change(
        self,
        conn: DictConnection,
        writes: Writes,
        job_id: int,
        decide: AdminDecide,
        *,
        dlq_reason: str | None = None,
    ) -> JobRecord | None:
        """Apply ``decide(job) -> (new | None, keep)`` to one job, re-reading if its head
        fact moved underneath. Returns the resulting snapshot (or the unchanged one).
        With ``dlq_reason`` the new snapshot goes into the DLQ instead."""
        for _ in range(_RETRIES):
            found = (await self._facts.resolve(conn, [job_id])).get(job_id)
            if found is None:
                return None
            new, keep = decide(found.job)
            if keep:
                return found.job
            async with conn.transaction():
                ok = await self._facts.transition(conn, writes, found, new, dlq_reason=dlq_reason)
            if ok:
                if found.job.state in LIVE_STATES and new is not None:
                    writes.notify.add(cancel_notification(job_id, found.job.run_lease))
                return new
        return None

    async def _cancel(
        self, conn: DictConnection, writes: Writes, job_id: int
    ) -> tuple[JobRecord | None, bool]:
        """Cancel one job as an operator does: the job as it is after (``None``: gone), and
        whether this write cancelled it. A job already finished is left alone and answers
        no child: one cancelled by a kind rule's effect keeps its children waiting, as on
        every engine (ADR 0032)."""
        made: list[JobRecord] = []

        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            cancel = lifecycle.operator_cancel(writes.now)
            if not cancel.applies(job.state):
                return None, True
            made.append(cancel.apply(job))
            return made[-1], False

        result = await self.change(conn, writes, job_id, decide)
        return result, bool(made) and result is made[-1]

    async def cancel_dependents(
        self, conn: DictConnection, writes: Writes, cancelled: list[int]
    ) -> None:
        """Apply their policies to the jobs waiting on the jobs an operator just cancelled
        (ADR 0032)."""
        done = [(job_id, JobState.Cancelled) for job_id in cancelled]
        await self.change_all(conn, writes, await pg_dependencies.finished(conn, done, writes.now))

    async def change_all(
        self, conn: DictConnection, writes: Writes, effects: Sequence[Effect]
    ) -> None:
        """Apply effects on other jobs in the caller's transaction (a job an effect's
        transition does not apply to, or that is gone, is left alone). Effects on
        deferred jobs (the waiting children a completion releases) are applied together
        (:meth:`_change_deferred`); the rest one job at a time."""
        for effect in await self._change_deferred(conn, writes, effects):

            def decide(
                target: JobRecord, transition: Transition = effect.transition
            ) -> tuple[JobRecord | None, bool]:
                if not transition.applies(target.state):
                    return None, True
                return transition.apply(target), False

            reason = effect.transition.dlq_reason
            await self.change(
                conn,
                writes,
                effect.job_id,
                decide,
                dlq_reason=None if reason is None else reason.value,
            )

    async def _change_deferred(
        self, conn: DictConnection, writes: Writes, effects: Sequence[Effect]
    ) -> list[Effect]:
        """Apply, set-wise, the effects whose job is deferred in a state its transition
        applies to: one statement takes all their head rows (in job id order) and answers
        their snapshots, one placement appends the next ones. Answers the effects left
        for :meth:`change` (a job not deferred, or in another state; a DLQ move; a job
        named twice, whose effects keep their order)."""
        ids = [effect.job_id for effect in effects]
        if not effects or len(set(ids)) != len(ids):
            return list(effects)
        eligible = {
            effect.job_id: effect
            for effect in effects
            if effect.transition.dlq_reason is None
            and effect.transition.applies_to & DEFERRED_STATES
        }
        if not eligible:
            return list(effects)
        pairs = sorted(
            (job_id, state.sql_name)
            for job_id, effect in eligible.items()
            for state in effect.transition.applies_to & DEFERRED_STATES
        )
        rows = await self._sql.exec(
            conn,
            "take_deferred_heads",
            ids=[job_id for job_id, _ in pairs],
            states=[state for _, state in pairs],
        )
        taken = [Resolved.from_row(row) for row in rows]
        moves = [
            (r, eligible[r.job.id].transition.apply(r.job)) for r in sorted(taken, key=_job_id)
        ]
        await self._facts.unique(conn, [(r.job, new) for r, new in moves])
        await self._facts.place(conn, [(new, r.ordering_key) for r, new in moves])
        for r, new in moves:
            writes.move(r.job, new)
        done = {r.job.id for r in taken}
        return [effect for effect in effects if effect.job_id not in done]

    async def drain_queue(self, queue: str) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            found = await self._facts.matching(conn, JobFilter(queue=queue))
            # Every lane first, in key order: the cancels below then take no lane lock out
            # of the order every retiring writer uses.
            await self._facts.mark_retiring(conn, found)
            cancelled: list[int] = []
            for r in found:
                if r.job.state not in DRAINABLE_STATES:
                    continue
                _, applied = await self._cancel(conn, writes, r.job.id)
                if applied:
                    cancelled.append(r.job.id)
            await self.cancel_dependents(conn, writes, cancelled)
            await self._facts.flush(conn, writes)
        return len(cancelled)

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            result, applied = await self._cancel(conn, writes, job_id)
            if applied:
                await self.cancel_dependents(conn, writes, [job_id])
            await self._facts.flush(conn, writes)
        return result

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        async with translated_errors(), self._connections.tx() as conn:
            holder = await self._sql.exec(conn, "unique_holder", key=unique_key)
            if not holder:
                return None
            found = (await self._facts.resolve(conn, [holder[0]["job_id"]])).get(
                holder[0]["job_id"]
            )
            if found is None or found.job.state.is_terminal:
                return None
            writes = Writes(self._clock.now())
            result, applied = await self._cancel(conn, writes, found.job.id)
            if applied:
                await self.cancel_dependents(conn, writes, [found.job.id])
            await self._facts.flush(conn, writes)
        return result

    def _operator_retry(self, now: datetime) -> AdminDecide:
        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            transition = lifecycle.operator_retry(job.state, now)
            if transition is None:
                return None, True
            return transition.apply(job), False

        return decide

    async def retried(self, conn: DictConnection, writes: Writes, job_ids: Sequence[int]) -> None:
        """The jobs the failure of ``job_ids``, retried in this transaction, held wait
        again (ADR 0032)."""

        async def restore(effects: Sequence[Effect]) -> list[int]:
            changed: list[int] = []
            for effect in effects:
                applied: list[int] = []

                def decide(
                    target: JobRecord,
                    transition: Transition = effect.transition,
                    applied: list[int] = applied,
                ) -> tuple[JobRecord | None, bool]:
                    applied.clear()
                    if not transition.applies(target.state):
                        return None, True
                    applied.append(target.id)
                    return transition.apply(target), False

                if await self.change(conn, writes, effect.job_id, decide) is not None:
                    changed.extend(applied)
            return changed

        await pg_dependencies.retried(conn, job_ids, restore, writes.now)

    async def _retry_one(
        self, conn: DictConnection, writes: Writes, job_id: int
    ) -> JobRecord | None:
        """An operator retry of one job, and of what its failure held."""
        before = (await self._facts.resolve(conn, [job_id])).get(job_id)
        result = await self.change(conn, writes, job_id, self._operator_retry(writes.now))
        if (
            before is not None
            and before.job.state in TERMINAL_STATES
            and result is not None
            and result.state != before.job.state
        ):
            await self.retried(conn, writes, [job_id])
        return result

    async def retry_job(self, job_id: int) -> JobRecord | None:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            result = await self._retry_one(conn, writes, job_id)
            await self._facts.flush(conn, writes)
        return result

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            failed = await self._facts.matching(conn, attrs.evolve(filter, state=JobState.Failed))
            retried = []
            for r in failed:
                result = await self._retry_one(conn, writes, r.job.id)
                if result is not None:
                    retried.append(result)
            await self._facts.flush(conn, writes)
        return retried

    async def _delete_where(self, filter: JobFilter, ids: Sequence[int] | None) -> int:
        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            return None, job.state in LIVE_STATES

        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            if ids is None:
                found = await self._facts.matching(conn, filter)
            else:
                found = list((await self._facts.resolve(conn, sorted(set(ids)))).values())
            count = 0
            gone: list[tuple[int, JobState]] = []
            for r in found:
                if r.job.state in LIVE_STATES:
                    continue
                before = writes.counts.copy()
                await self.change(conn, writes, r.job.id, decide)
                if writes.counts != before:
                    count += 1
                    gone.append((r.job.id, r.job.state))
            # The children still waiting on a deleted job: as for a cancel.
            await self.cancel_dependents(conn, writes, await pg_dependencies.deleted(conn, gone))
            await self._facts.flush(conn, writes)
        return count

    async def discard_failed(self, kind: str) -> int:
        return await self._delete_where(JobFilter(kind=kind, state=JobState.Failed), None)

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._delete_where(JobFilter(), list(job_ids))

    async def answer_vanished_parents(
        self, *, after: int, limit: int, seen_before: datetime
    ) -> VanishedStep:
        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            following, gone = await pg_dependencies.vanished(
                conn,
                after=after,
                limit=limit,
                now=writes.now,
                seen_before=seen_before,
                schema=self._sql.schema,
            )
            await self.cancel_dependents(conn, writes, gone)
            await self._facts.flush(conn, writes)
        return VanishedStep(following, len(gone))

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        now = self._clock.now()
        floor = RetentionFloor(completed=completed, failed=failed)

        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            return None, not job.state.is_terminal

        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(now)
            rows = await self._retention_due(conn, floor, now, max(batch_size, 0))
            for r in rows:
                await self.change(conn, writes, r.job.id, decide)
            await self._facts.flush(conn, writes)
            # CEL expressions of callbacks that ended without a resolve (ADR 0004, "CEL").
            await self._sql.exec(
                conn,
                "cleanup_callback_expressions",
                schema=self._sql.schema,
                before=now - timedelta(days=1),
                limit=max(batch_size, 0),
            )
        return len(rows)

    async def _retention_due(
        self, conn: DictConnection, floor: RetentionFloor, now: datetime, limit: int
    ) -> list[Resolved]:
        """Up to ``limit`` terminal jobs past their retention, oldest first: pages of the
        facts that can be due (``retention_due``), each page's jobs resolved, those still
        terminal and due kept, until ``limit`` are found or the candidates run out."""
        found: dict[int, Resolved] = {}
        after_at, after_id = datetime.min.replace(tzinfo=UTC), 0
        while len(found) < limit:
            page = await self._sql.exec(
                conn,
                "retention_due",
                completed_before=floor.cutoff(JobState.Completed, now),
                cancelled_before=floor.cutoff(JobState.Cancelled, now),
                failed_before=floor.cutoff(JobState.Failed, now),
                after_at=after_at,
                after_id=after_id,
                limit=limit,
            )
            current = await self._facts.resolve(conn, [row["id"] for row in page])
            for row in page:
                r = current.get(row["id"])
                if (
                    r is not None
                    and r.job.id not in found
                    and r.job.finalized_at is not None
                    and floor.is_expired(r.job.state, r.job.finalized_at, now)
                ):
                    found[r.job.id] = r
                    if len(found) == limit:
                        break
            if len(page) < limit:
                break
            after_at, after_id = page[-1]["finalized_at"], page[-1]["id"]
        return sorted(found.values(), key=lambda r: (r.job.finalized_at, r.job.id))

    async def reset(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting (``reset``)."""
        async with translated_errors(), self._connections.tx() as conn:
            await run(conn, self._sql["reset"])
        self._lanes.forget_shards()
