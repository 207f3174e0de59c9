"""Batch operations of the queue-storage engine: their targets and per-job changes.

A reprioritised or moved job is an admin change like a cancel:
:meth:`~.admin_changes.AdminChanges.change` retires its head fact through
:meth:`~.facts.FactWriter.transition` (a ready row is tombstoned under its lane lock, a
deferred row taken) and appends the new snapshot at the tail of its new lane, so claims
see it exactly once and in ``(run_at, id)`` order there. The control table of batch
operations is shared with the canonical engine (``awa.adapters._pg.batch_ops``).
"""

from __future__ import annotations

from psycopg import sql

from awa.adapters._pg.batch_ops import target_params, target_statements
from awa.adapters._pg.errors import translated_errors
from awa.adapters.postgres_queue_storage.admin_changes import AdminChanges
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.snapshots import Resolved, Writes
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.domain.batch_ops import BatchFilter, BatchSpec, ItemOutcome, ItemResult, batch_change
from awa.domain.job import JobRecord
from awa.ports.clock import Clock


class BatchTargets:
    """Targets over ``{schema}.jobs_resolved`` and per-job changes through
    :meth:`~.admin_changes.AdminChanges.change`."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        changes: AdminChanges,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._facts = facts
        self._changes = changes
        self._clock = clock
        self._count, self._list = target_statements(
            sql.Identifier(statements.schema, "jobs_resolved").as_string()
        )

    async def count_batch_targets(self, filter: BatchFilter) -> int:
        async with translated_errors(), self._connections.tx() as conn:
            cur = await run(conn, self._count, target_params(filter))
            row = await cur.fetchone()
        return 0 if row is None else int(row["n"])

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        params = {**target_params(filter), "after_id": after_id, "limit": max(limit, 0)}
        async with translated_errors(), self._connections.tx() as conn:
            cur = await run(conn, self._list, params)
            rows = await cur.fetchall()
        return [Resolved.from_row(row).job for row in rows]

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        outcome = ItemOutcome.MISSING

        def decide(job: JobRecord) -> tuple[JobRecord | None, bool]:
            nonlocal outcome
            new = batch_change(job, spec)
            outcome = ItemOutcome.SKIPPED if new is None else ItemOutcome.PROCESSED
            return new, new is None

        async with translated_errors(), self._connections.tx() as conn:
            writes = Writes(self._clock.now())
            result = await self._changes.change(conn, writes, job_id, decide)
            await self._facts.flush(conn, writes)
        if result is None and outcome == ItemOutcome.PROCESSED:
            # Every re-read found the head fact moved again (a busy lane); nothing changed.
            return ItemResult(
                job_id, ItemOutcome.ERRORED, f"job {job_id} kept changing; not moved, retry"
            )
        return ItemResult(job_id, outcome)
