"""The :class:`~awa.ports.relations.JobRelations` port on Postgres, shared by both
engines: edges and a batch's counts from ``awa.job_dependencies``, key loads from
``awa.jobs`` (every plane)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.batches import BatchCounts
from awa.ports.relations import DueEdges, Edge, EdgeCursor, JobEdges, KeyLoad

#: A cursor before every edge: the walk's start.
_BEFORE_ALL = datetime.min.replace(tzinfo=UTC)


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "relations.sql")[name].encode()


def _edges(rows: list[dict[str, Any]]) -> tuple[tuple[Edge, ...], int]:
    edges = tuple(
        Edge(
            job_id=int(row["job_id"]),
            satisfied_at=row["satisfied_at"],
            failed=bool(row["failed"]),
            on_failure=str(row["on_failure"]),
        )
        for row in rows
    )
    return edges, int(rows[0]["total"]) if rows else 0


class PgJobRelations:
    """Edges and key loads read on ``pool`` (one per backend)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection]) -> None:
        self._pool = pool

    async def job_edges(self, job_id: int, *, limit: int) -> JobEdges:
        params = {"job_id": job_id, "limit": limit}
        async with translated_errors(), self._pool.connection() as conn:
            parents = list(await (await conn.execute(_query("job_parents"), params)).fetchall())
            children = list(await (await conn.execute(_query("job_children"), params)).fetchall())
        parent_edges, parent_count = _edges(parents)
        child_edges, child_count = _edges(children)
        return JobEdges(parent_edges, child_edges, parent_count, child_count)

    async def _counts(self, job_id: int) -> tuple[BatchCounts, bool]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("parent_counts"), {"job_id": job_id})
            row = await cur.fetchone()
        assert row is not None  # an aggregate answers one row
        counts = BatchCounts(
            size=int(row["size"]),
            completed=int(row["completed"]),
            failed=int(row["failed"]),
            cancelled=int(row["cancelled"]),
        )
        return counts, bool(row["batch"])

    async def parent_counts(self, job_id: int) -> BatchCounts:
        return (await self._counts(job_id))[0]

    async def batch_counts(self, batch_id: int) -> BatchCounts | None:
        counts, batch = await self._counts(batch_id)
        return counts if batch else None

    async def due_edge_children(
        self, *, before: datetime, after: EdgeCursor | None, limit: int
    ) -> DueEdges:
        params = {
            "before": before,
            "after_at": _BEFORE_ALL if after is None else after.resolved_at,
            "after_id": 0 if after is None else after.child_id,
            "limit": limit,
        }
        async with translated_errors(), self._pool.connection() as conn:
            rows = await (await conn.execute(_query("due_edge_children"), params)).fetchall()
        if not rows:
            return DueEdges(children=(), cursor=None, full=False)
        first = rows[0]
        return DueEdges(
            children=tuple(int(row["child_id"]) for row in rows if row["due"]),
            cursor=EdgeCursor(first["last_at"], int(first["last_id"])),
            full=int(first["seen"]) >= limit,
        )

    async def prune_edges(
        self,
        children: Sequence[int],
        *,
        before: datetime,
        batches_of: Sequence[int] = (),
        now: datetime,
    ) -> int:
        if not children:
            return 0
        params = {
            "children": list(children),
            "batches": list(batches_of),
            "before": before,
            "now": now,
        }
        async with translated_errors(), self._pool.connection() as conn:
            row = await (await conn.execute(_query("prune_edges"), params)).fetchone()
        assert row is not None
        return int(row["pruned"])

    async def prune_batches(self, *, before: datetime) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("prune_batches"), {"before": before})
            return cur.rowcount

    async def key_loads(
        self,
        queue: str,
        *,
        running_states: Sequence[str],
        waiting_states: Sequence[str],
        limit: int,
    ) -> list[KeyLoad]:
        params = {
            "queue": queue,
            "running": list(running_states),
            "waiting": list(waiting_states),
            "limit": limit,
        }
        async with translated_errors(), self._pool.connection() as conn:
            rows = await (await conn.execute(_query("key_loads"), params)).fetchall()
        return [
            KeyLoad(key=str(row["key"]), running=int(row["running"]), waiting=int(row["waiting"]))
            for row in rows
        ]

    async def running_of_keys(
        self, queue: str, keys: Sequence[str], *, running_states: Sequence[str]
    ) -> dict[str, int]:
        if not keys:
            return {}
        params = {"queue": queue, "keys": list(keys), "running": list(running_states)}
        async with translated_errors(), self._pool.connection() as conn:
            rows = await (await conn.execute(_query("running_of_keys"), params)).fetchall()
        return {str(row["key"]): int(row["running"]) for row in rows}
