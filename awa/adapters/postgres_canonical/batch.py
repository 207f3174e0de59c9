"""Batch targets of the canonical engine (the operations live in their own store)."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from awa.adapters._pg.batch_ops import target_params, target_statements
from awa.adapters._pg.rows import job_from_row
from awa.adapters.postgres_canonical.base import EngineBase
from awa.domain.batch_ops import BatchFilter, BatchSpec, ItemOutcome, ItemResult, batch_change
from awa.domain.job import JobRecord

_COUNT, _LIST = target_statements("awa.canonical_jobs")


class BatchOps(EngineBase):
    """Targets and per-job changes over ``awa.canonical_jobs``."""

    async def count_batch_targets(self, filter: BatchFilter) -> int:
        async with self._connection() as conn:
            cur = await conn.execute(_COUNT, target_params(filter))
            row = await cur.fetchone()
        return 0 if row is None else int(row["n"])

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        params = {**target_params(filter), "after_id": after_id, "limit": max(limit, 0)}
        async with self._connection() as conn:
            cur = await conn.execute(_LIST, params)
            rows = await cur.fetchall()
        return [job_from_row(row) for row in rows]

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        async with self._transaction() as conn:
            row = await self._one(conn, "batch_lock_job", {"id": job_id})
            if row is None:
                return ItemResult(job_id, ItemOutcome.MISSING)
            new = batch_change(job_from_row(row), spec)
            if new is None:
                return ItemResult(job_id, ItemOutcome.SKIPPED)
            await self._all(
                conn,
                "batch_update_job",
                {
                    "id": job_id,
                    "priority": new.priority,
                    "queue": new.queue,
                    "metadata": Jsonb(new.metadata),
                },
            )
        return ItemResult(job_id, ItemOutcome.PROCESSED)
