"""Callbacks: an attempt that waits for an external system, and its resolution.

Registering, waiting, heartbeating and resolving are guarded changes of the attempt
(:meth:`~.outcomes.Outcomes.guarded`); a callback's CEL expressions live in their own
table until it resolves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.outcomes import RUNNING_ONLY, Outcomes, Stale, take
from awa.adapters.postgres_queue_storage.snapshots import Writes
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain import lifecycle
from awa.domain.callbacks import CallbackExpressions, callback_not_found, check_action
from awa.domain.job import JobRecord, RunLease
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.storage import Ack


class Callbacks:
    """The callback half of the storage port."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        outcomes: Outcomes,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._outcomes = outcomes

    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        replaced: list[str] = []

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            if job.callback_id is not None:
                replaced.append(job.callback_id)
            return (
                attrs.evolve(job, callback_id=callback_id, callback_timeout_at=w.now + timeout),
                None,
            )

        ack = await self._outcomes.guarded(lease, decide, RUNNING_ONLY)
        saved = None if expressions is None or expressions.is_empty else expressions
        if ack is not Ack.APPLIED or (saved is None and not replaced):
            return ack
        # The registration replaces the attempt's earlier callback and its expressions.
        async with translated_errors(), self._connections.tx() as conn:
            if replaced:
                await self._sql.exec(
                    conn,
                    "drop_attempt_callback_expressions",
                    callback_id=replaced[-1],
                    job_id=lease.job_id,
                    run_lease=lease.lease,
                )
            if saved is not None:
                await self._sql.exec(
                    conn,
                    "save_callback_expressions",
                    callback_id=callback_id,
                    schema=self._sql.schema,
                    job_id=lease.job_id,
                    run_lease=lease.lease,
                    filter=saved.filter,
                    on_complete=saved.on_complete,
                    on_fail=saved.on_fail,
                    transform=saved.transform,
                )
        return ack

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        lease = await self._by_callback(callback_id)
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(
                conn,
                "load_callback_expressions",
                callback_id=callback_id,
                job_id=lease.job_id,
                run_lease=lease.lease,
            )
        if not rows:
            return None
        row = rows[0]
        return CallbackExpressions(
            filter=row["filter"],
            on_complete=row["on_complete"],
            on_fail=row["on_fail"],
            transform=row["transform"],
        )

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            if job.callback_id is None:
                raise Stale()
            return attrs.evolve(job, state=JobState.WaitingExternal), None

        return await self._outcomes.guarded(lease, decide, RUNNING_ONLY)

    async def _by_callback(self, callback_id: str) -> RunLease:
        async with translated_errors(), self._connections.tx() as conn:
            rows = await self._sql.exec(conn, "lease_by_callback", callback_id=callback_id)
            resolved = await self._facts.resolve(conn, [r["job_id"] for r in rows])
        for row in rows:
            found = resolved.get(row["job_id"])
            if (
                found is not None
                and found.open_claim
                and found.job.run_lease == row["run_lease"]
                and found.job.callback_id == callback_id
                and found.job.state in LIVE_STATES
            ):
                return found.job.lease
        raise callback_not_found(callback_id)

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        resolution = check_action(action)
        await self._outcomes.refresh_dlq()
        lease = await self._by_callback(callback_id)
        result: list[JobRecord] = []

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            transition = lifecycle.callback_resolution(
                resolution,
                self._outcomes.attempt_facts(job),
                payload=payload,
                error=error,
                expression=expression,
                now=w.now,
            )
            outcome = take(transition, job)
            result.append(outcome[0])
            return outcome

        ack = await self._outcomes.guarded(lease, decide)
        if ack is Ack.STALE:
            raise callback_not_found(callback_id)
        async with translated_errors(), self._connections.tx() as conn:
            await self._sql.exec(conn, "drop_callback_expressions", callback_id=callback_id)
        return result[-1]

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        lease = await self._by_callback(callback_id)
        result: list[JobRecord] = []

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            outcome = take(lifecycle.callback_heartbeat(timeout=timeout, now=w.now), job)
            result.append(outcome[0])
            return outcome

        if await self._outcomes.guarded(lease, decide) is Ack.STALE:
            raise callback_not_found(callback_id)
        return result[-1]
