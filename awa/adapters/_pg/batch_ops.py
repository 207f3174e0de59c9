"""Batch operations on Postgres: the compiled target filter both engines run over their
own jobs, and the store of the control tables ``awa.batch_operations`` /
``awa.batch_operation_items``."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.domain.batch_ops import (
    ACTIVE_STATES,
    CANCELLABLE_STATES,
    ELIGIBLE_STATES,
    FINAL_STATES,
    SUPERSEDED_BY_PROCESSED,
    BatchFilter,
    BatchOperation,
    BatchOpState,
    BatchSpec,
    ItemResult,
    after_scan,
    cancel_requested,
    finishing_state,
    first_results,
    operation_not_found,
    parse_filter,
    parse_op_kind,
    parse_operation_id,
    parse_spec,
    runner_instance,
    step_states,
)
from awa.ports.clock import Clock


@functools.cache
def _queries() -> dict[str, str]:
    return load_queries("awa.adapters._pg", "batch_ops.sql")


def _q(name: str) -> bytes:
    return _queries()[name].encode()


def target_statements(relation: str) -> tuple[bytes, bytes]:
    """``(count, list)`` statements of the target filter over ``relation`` (a trusted,
    quoted relation name: ``awa.canonical_jobs`` or a queue-storage ``jobs_resolved``)."""
    where = _queries()["target_where"]
    return (
        _queries()["count_targets"].format(relation=relation, where=where).encode(),
        _queries()["list_targets"].format(relation=relation, where=where).encode(),
    )


def target_params(filter: BatchFilter) -> dict[str, Any]:
    return {
        "eligible": sorted(s.sql_name for s in ELIGIBLE_STATES),
        "kind": filter.kind,
        "queue": filter.queue,
        "ids": None if filter.ids is None else list(filter.ids),
        "tag": filter.tag,
        "state": None if filter.state is None else filter.state.sql_name,
        "created_gte": filter.created_at_gte,
        "created_lt": filter.created_at_lt,
    }


def _states(states: frozenset[BatchOpState]) -> list[str]:
    return sorted(str(s) for s in states)


#: The states an add or a record may write an operation in (it keeps its state).
_STAYING = _states(step_states(lambda state: state))
#: The states a scan may end in (``batch_ops.after_scan``).
_SCANNED = _states(step_states(after_scan))


def _uuid(op_id: str) -> uuid.UUID:
    return uuid.UUID(parse_operation_id(op_id))


def op_from_row(row: Mapping[str, Any]) -> BatchOperation:
    spec = dict(row["spec"])
    return BatchOperation(
        id=str(row["id"]),
        op_kind=parse_op_kind(row["op_kind"]),
        filter=parse_filter(row["filter"]),
        spec=parse_spec(row["op_kind"], spec),
        state=BatchOpState(row["state"]),
        submitted_by=row["submitted_by"],
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        finalized_at=row["finalized_at"],
        cursor=row["cursor"],
        total_matched=row["total_matched"],
        processed=int(row["processed"]),
        skipped=int(row["skipped"]),
        errored=int(row["errored"]),
        last_error=row["last_error"],
        runner_instance=None if row["runner_instance"] is None else str(row["runner_instance"]),
        retention_until=row["retention_until"],
        updated_at=row["updated_at"],
    )


class PgBatchOperationStore:
    """:class:`~awa.ports.batch_ops.BatchOperationStore` on the control tables, shared by
    every engine of the database (one per backend, on its pool)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection], clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def _op_statement(self, name: str, params: dict[str, Any]) -> BatchOperation | None:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_q(name), params)
            row = await cur.fetchone()
        return None if row is None else op_from_row(row)

    async def _op_required(self, name: str, params: dict[str, Any]) -> BatchOperation:
        op = await self._op_statement(name, params)
        if op is None:
            raise operation_not_found(str(params["id"]))
        return op

    async def _op_as_it_is(self, op_uuid: uuid.UUID) -> BatchOperation:
        """The operation a guarded step did not write (finished, or not there)."""
        return await self._op_required("get_op", {"id": op_uuid})

    async def _op_guarded(self, name: str, params: dict[str, Any]) -> BatchOperation:
        """A step whose statement writes the operation only in the states its guard names;
        otherwise the operation as it is."""
        op = await self._op_statement(name, params)
        return await self._op_as_it_is(params["id"]) if op is None else op

    async def create_batch_operation(
        self, *, spec: BatchSpec, filter: BatchFilter, submitted_by: str | None = None
    ) -> BatchOperation:
        return await self._op_required(
            "insert_op",
            {
                "id": uuid.uuid4(),
                "op_kind": str(spec.op_kind),
                "filter": Jsonb(filter.to_json()),
                "spec": Jsonb(spec.to_json()),
                "state": str(BatchOpState.PENDING),
                "submitted_by": submitted_by,
                "now": self._clock.now(),
            },
        )

    async def get_batch_operation(self, op_id: str) -> BatchOperation | None:
        return await self._op_statement("get_op", {"id": _uuid(op_id)})

    async def list_batch_operations(
        self, *, state: BatchOpState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                _q("list_ops"),
                {"state": None if state is None else str(state), "limit": max(limit, 0)},
            )
            rows = await cur.fetchall()
        return [op_from_row(row) for row in rows]

    async def cancel_batch_operation(self, op_id: str) -> BatchOperation | None:
        return await self._op_statement(
            "cancel_op",
            {
                "id": _uuid(op_id),
                "target": str(cancel_requested(BatchOpState.PENDING)),
                "from_states": sorted(str(s) for s in CANCELLABLE_STATES),
                "now": self._clock.now(),
            },
        )

    async def purge_batch_operations(self, *, before: datetime, limit: int = 1000) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                _q("purge_ops"),
                {
                    "final": sorted(str(s) for s in FINAL_STATES),
                    "before": before,
                    "limit": max(limit, 0),
                },
            )
            return cur.rowcount

    async def next_batch_operation(self, *, runner: str) -> BatchOperation | None:
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                _q("next_op"), {"active": sorted(str(s) for s in ACTIVE_STATES)}
            )
            row = await cur.fetchone()
            if row is None:
                return None
            if row["state"] != str(BatchOpState.PENDING):
                return op_from_row(row)
            runner_id = runner_instance(runner)
            cur = await conn.execute(
                _q("begin_scan"),
                {
                    "id": row["id"],
                    "state": str(BatchOpState.SCANNING),
                    "runner": None if runner_id is None else uuid.UUID(runner_id),
                    "now": self._clock.now(),
                },
            )
            began = await cur.fetchone()
        assert began is not None
        return op_from_row(began)

    async def add_batch_items(self, op_id: str, job_ids: Sequence[int]) -> BatchOperation:
        op_uuid = _uuid(op_id)
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(
                _q("add_items"), {"id": op_uuid, "job_ids": list(job_ids), "states": _STAYING}
            )
        return await self._op_as_it_is(op_uuid)

    async def start_batch_running(self, op_id: str, *, cursor: dict[str, Any]) -> BatchOperation:
        return await self._op_guarded(
            "start_running",
            {
                "id": _uuid(op_id),
                "states": _SCANNED,
                "cancelling": str(BatchOpState.CANCELLING),
                "running": str(BatchOpState.RUNNING),
                "cursor": Jsonb(cursor),
                "now": self._clock.now(),
            },
        )

    async def pending_batch_items(self, op_id: str, *, limit: int) -> list[int]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                _q("pending_items"), {"id": _uuid(op_id), "limit": max(limit, 0)}
            )
            rows = await cur.fetchall()
        return [int(row["job_id"]) for row in rows]

    async def record_batch_items(
        self, op_id: str, results: Sequence[ItemResult], *, cursor: dict[str, Any]
    ) -> BatchOperation:
        first = first_results(results)
        op_uuid = _uuid(op_id)
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(_q("lock_op_for_record"), {"id": op_uuid, "states": _STAYING})
            if await cur.fetchone() is not None:
                cur = await conn.execute(
                    _q("record_items"),
                    {
                        "id": op_uuid,
                        "job_ids": [r.job_id for r in first],
                        "outcomes": [str(r.outcome) for r in first],
                        "errors": [r.error for r in first],
                        "superseded": sorted(str(o) for o in SUPERSEDED_BY_PROCESSED),
                        "cursor": Jsonb(cursor),
                        "now": self._clock.now(),
                    },
                )
                row = await cur.fetchone()
                assert row is not None
                return op_from_row(row)
        return await self._op_as_it_is(op_uuid)

    async def finish_batch_operation(
        self,
        op_id: str,
        *,
        state: BatchOpState,
        last_error: str | None = None,
        retention: timedelta,
    ) -> BatchOperation:
        state = finishing_state(state)
        op_uuid = _uuid(op_id)
        now = self._clock.now()
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                _q("finish_op"),
                {
                    "id": op_uuid,
                    "states": _states(step_states(lambda _: state)),
                    "state": str(state),
                    "last_error": last_error,
                    "now": now,
                    "retention_until": now + retention,
                },
            )
            if await cur.fetchone() is not None:
                cur = await conn.execute(_q("sweep_items"), {"id": op_uuid, "now": now})
                row = await cur.fetchone()
                assert row is not None
                return op_from_row(row)
        return await self._op_as_it_is(op_uuid)
