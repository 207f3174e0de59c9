"""Shared machinery of the canonical engine: pool, queries, units of work, failure routing."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Self

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.decode import fetch_decodable
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.migrations import canonical_schema_version, require_schema
from awa.adapters._pg.pool import DictConnection, open_pool
from awa.adapters._pg.rows import dlq_from_row, job_from_row
from awa.adapters._pg.sql import load_queries
from awa.adapters.clock import SystemClock
from awa.domain import lifecycle
from awa.domain.channels import cancel_notification
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.job import JobRecord, RunLease
from awa.domain.kind_policies import Effect, KindPolicies
from awa.domain.lifecycle import AttemptFacts, Transition
from awa.domain.policies import Backoff
from awa.domain.states import LIVE_STATES, JobState
from awa.ports.clock import Clock
from awa.ports.storage import UnitOfWork

_PACKAGE = "awa.adapters.postgres_canonical"
_QUERY_FILES = ("worker.sql", "maintenance.sql", "admin.sql", "dlq.sql", "batch.sql")

AnyConnection = psycopg.AsyncConnection[Any]


@functools.cache
def _queries() -> dict[str, bytes]:
    merged: dict[str, bytes] = {}
    for filename in _QUERY_FILES:
        for name, text in load_queries(_PACKAGE, filename).items():
            if name in merged:
                raise RuntimeError(f"query {name!r} is defined twice")
            merged[name] = text.encode()
    return merged


def query(name: str) -> bytes:
    """The named statement from this adapter's ``.sql`` files (loaded once)."""
    return _queries()[name]


def attempt_facts(row: Mapping[str, Any]) -> AttemptFacts:
    """What the lifecycle reads about a locked attempt row (``dlq_enabled`` joined in)."""
    return AttemptFacts(row["attempt"], row["max_attempts"], bool(row["dlq_enabled"]), row["kind"])


def transition_params(items: Sequence[tuple[RunLease, Transition]]) -> dict[str, Any]:
    """The ``apply_transitions`` parameters: one element per attempt of every column.

    One statement guards every row by the same states, so the batch's transitions must
    apply to the same states (a sweep's do: they are of one kind).
    """
    applies_to = items[0][1].applies_to
    if any(t.applies_to != applies_to for _, t in items):
        raise ValueError("one apply_transitions batch must guard every row by the same states")
    return {
        "applies_to": sorted(state.sql_name for state in applies_to),
        "ids": [lease.job_id for lease, _ in items],
        "leases": [lease.lease for lease, _ in items],
        "states": [None if t.state is None else t.state.sql_name for _, t in items],
        "run_ats": [t.run_at for _, t in items],
        "attempts": [t.attempt.value for _, t in items],
        "finalized_ats": [t.finalized_at for _, t in items],
        "errors": [None if t.error is None else Jsonb(t.error.as_dict()) for _, t in items],
        "heartbeat_ats": [t.heartbeat_at for _, t in items],
        "metadata": [None if t.metadata is None else Jsonb(dict(t.metadata)) for _, t in items],
        "clear_progress": [t.clear_progress for _, t in items],
        "clear_callback": [t.clear_callback for _, t in items],
        "callback_timeout_ats": [t.callback_timeout_at for _, t in items],
        "clear_finalized": [t.clear_finalized for _, t in items],
    }


class CanonicalUnitOfWork:
    """A transaction on one connection. Enqueues through it commit or roll back with it."""

    def __init__(self, conn: AnyConnection, owner: object) -> None:
        self.conn = conn
        self.owner = owner
        self.open = True


class EngineBase:
    """Pool, clock, backoff and per-kind policies plus the helpers every canonical
    operation uses."""

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        owns_pool: bool = False,
        policies: KindPolicies | None = None,
    ) -> None:
        self._pool = pool
        # Per queue, the concurrency key this process's last limited claim walked to
        # (ADR 0029: the next claim starts after it).
        self._key_cursor: dict[str, str] = {}
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backoff = backoff if backoff is not None else Backoff()
        self._policies = policies if policies is not None else KindPolicies()
        self._owns_pool = owns_pool

    @classmethod
    async def open(
        cls,
        database_url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        max_connections: int = 10,
        policies: KindPolicies | None = None,
    ) -> Self:
        """Open a pool on ``database_url`` after checking the schema is migrated.

        Raises ``SchemaNotMigrated`` when the schema is missing, older than this engine
        needs, or newer than this package knows.
        """
        pool = await open_pool(database_url, max_connections=max_connections)
        try:
            async with translated_errors(), pool.connection() as conn:
                await require_schema(conn, minimum=canonical_schema_version())
        except BaseException:
            await pool.close()
            raise
        return cls(pool, clock=clock, backoff=backoff, owns_pool=True, policies=policies)

    #: Alias of :meth:`open`.
    connect = open

    def _conninfo(self) -> str:
        """Connection string of the pool's database, for dedicated connections."""
        conninfo = self._pool.conninfo
        if not isinstance(conninfo, str):
            raise DatabaseError("the pool's connection string is computed; pass a URL instead")
        return conninfo

    @property
    def pool(self) -> AsyncConnectionPool[DictConnection]:
        return self._pool

    # ---------------------------------------------------------------- units of work
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[CanonicalUnitOfWork]:
        """A unit of work on one pooled connection: commit on exit, roll back on error."""
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            uow = CanonicalUnitOfWork(conn, self)
            try:
                yield uow
            finally:
                uow.open = False

    def unit_of_work_for(self, conn: AnyConnection) -> CanonicalUnitOfWork:
        """Wrap a caller's connection that is already inside a transaction."""
        return CanonicalUnitOfWork(conn, self)

    def _own_uow(self, uow: UnitOfWork) -> CanonicalUnitOfWork:
        if not isinstance(uow, CanonicalUnitOfWork):
            raise DatabaseError("the unit of work does not belong to a canonical engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow

    # ---------------------------------------------------------------- connections
    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[DictConnection]:
        """A pooled autocommit connection; driver errors leave as domain errors."""
        async with translated_errors(), self._pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[DictConnection]:
        """A pooled connection inside a transaction."""
        async with self._connection() as conn, conn.transaction():
            yield conn

    @staticmethod
    @asynccontextmanager
    async def _atomic(conn: AnyConnection) -> AsyncIterator[None]:
        """Run the block all-or-nothing without ending a transaction the caller owns.

        Inside an open transaction this is a savepoint. A caller's non-autocommit
        connection with no statement run yet is also "in a transaction" for the caller,
        but ``conn.transaction()`` would BEGIN and COMMIT one of its own there, so an
        explicit savepoint (which opens the implicit transaction) is used instead.
        """
        status = conn.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise DatabaseError("the transaction is aborted; roll it back first")
        if status == TransactionStatus.INTRANS or conn.autocommit:
            async with conn.transaction():
                yield
            return
        await conn.execute("SAVEPOINT awa_atomic")
        try:
            yield
        except BaseException:
            await conn.execute("ROLLBACK TO SAVEPOINT awa_atomic")
            await conn.execute("RELEASE SAVEPOINT awa_atomic")
            raise
        await conn.execute("RELEASE SAVEPOINT awa_atomic")

    @staticmethod
    async def _all(conn: AnyConnection, name: str, params: Mapping[str, Any]) -> list[DictRow]:
        # An explicit dict-row cursor, because callers' connections may use any row factory.
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query(name), params)
            return await fetch_decodable(cur) if cur.description is not None else []

    @classmethod
    async def _one(
        cls, conn: AnyConnection, name: str, params: Mapping[str, Any]
    ) -> DictRow | None:
        rows = await cls._all(conn, name, params)
        return rows[0] if rows else None

    async def _conflict(self, conn: AnyConnection, keys: Iterable[bytes | None]) -> UniqueConflict:
        """A ``UniqueConflict`` naming the holder of the first clashing key.

        ``conn`` must be usable again (the failed statement ran under a rolled-back
        savepoint), so no second pooled connection is needed.
        """
        wanted = [key for key in keys if key is not None]
        holders: dict[bytes, int] = {}
        if wanted:
            rows = await self._all(conn, "unique_holders", {"keys": wanted})
            holders = {bytes(row["unique_key"]): row["job_id"] for row in rows}
        for key in wanted:
            if key in holders:
                return UniqueConflict(
                    f"unique key already held by job {holders[key]}", job_id=holders[key]
                )
        return UniqueConflict("a live job already holds this unique key")

    # ---------------------------------------------------------------- attempt outcomes
    async def _notify_cancel(self, conn: AnyConnection, job_id: int, run_lease: int) -> None:
        channel, payload = cancel_notification(job_id, run_lease)
        await self._all(conn, "notify_cancel", {"channel": channel, "payload": payload})

    async def _apply(
        self,
        conn: AnyConnection,
        items: Sequence[tuple[RunLease, Transition]],
        *,
        now: datetime,
        effects: bool = False,
    ) -> tuple[set[tuple[int, int]], dict[int, DictRow]]:
        """Apply lifecycle transitions in one statement, then hold the failures they
        route to the DLQ in one more. Returns the ``(id, run_lease)`` pairs that applied
        and the DLQ rows by job id.

        ``effects``: the items are attempts' transitions (outcomes, callback resolutions,
        rescues); those that end an attempt carry the effects their kind's rule attaches,
        applied with them all-or-nothing (ADR 0028)."""
        if not items:
            return set(), {}
        if not effects:
            return await self._apply_transitions(conn, items, now=now)
        async with self._atomic(conn):
            applied, held = await self._apply_transitions(conn, items, now=now)
            ended: list[tuple[int, JobState]] = []
            for lease, transition in items:
                state = transition.state
                if state is None or state in LIVE_STATES:
                    continue
                if (lease.job_id, lease.lease) in applied:
                    ended.append((lease.job_id, state))
                    if self._policies.has_effects:
                        await self._apply_effects(conn, lease.job_id, held, now)
            # The children waiting on the jobs that finished (ADR 0032).
            await self._change_jobs(conn, await pg_dependencies.finished(conn, ended, now), now)
        return applied, held

    async def _apply_effects(
        self, conn: AnyConnection, job_id: int, held: Mapping[int, DictRow], now: datetime
    ) -> None:
        """Apply the effects of the ended attempt of ``job_id`` (read as the transition
        left it: its row, or its DLQ entry) to the jobs they name, each locked first."""
        if job_id in held:
            job = dlq_from_row(held[job_id]).job
        else:
            row = await self._one(conn, "lock_job", {"id": job_id})
            if row is None:
                return
            job = job_from_row(row)
        await self._change_jobs(conn, lifecycle.effects(self._policies, job), now)

    async def _change_jobs(
        self, conn: AnyConnection, effects: Sequence[Effect], now: datetime
    ) -> list[int]:
        """Apply effects on other jobs, each target locked first; a running one cancelled
        is told. Answers the jobs changed."""
        changed: list[int] = []
        for effect in effects:
            target = await self._one(conn, "lock_job", {"id": effect.job_id})
            if target is None:
                continue
            before = job_from_row(target)
            if not effect.transition.applies(before.state):
                continue
            after = await self._apply_locked(conn, target, effect.transition, now)
            changed.append(before.id)
            if lifecycle.ended_attempt(before.state, after.state):
                await self._notify_cancel(conn, before.id, before.run_lease)
        return changed

    async def _retried(self, conn: AnyConnection, job_ids: Sequence[int], now: datetime) -> None:
        """The jobs the failure of ``job_ids``, retried in this transaction, held wait
        again (ADR 0032)."""

        async def restore(effects: Sequence[Effect]) -> list[int]:
            return await self._change_jobs(conn, effects, now)

        await pg_dependencies.retried(conn, job_ids, restore, now)

    async def _apply_transitions(
        self,
        conn: AnyConnection,
        items: Sequence[tuple[RunLease, Transition]],
        *,
        now: datetime,
    ) -> tuple[set[tuple[int, int]], dict[int, DictRow]]:
        rows = await self._all(conn, "apply_transitions", transition_params(items))
        applied = {(row["id"], row["run_lease"]) for row in rows}
        routed = [
            (lease.job_id, t.dlq_reason.value)
            for lease, t in items
            if t.dlq_reason is not None and (lease.job_id, lease.lease) in applied
        ]
        held: dict[int, DictRow] = {}
        if routed:
            params = {
                "ids": [job_id for job_id, _ in routed],
                "reasons": [reason for _, reason in routed],
                "now": now,
            }
            held = {row["job_id"]: row for row in await self._all(conn, "move_to_dlq", params)}
        return applied, held

    async def _apply_locked(
        self,
        conn: AnyConnection,
        row: Mapping[str, Any],
        transition: Transition,
        now: datetime,
        *,
        effects: bool = False,
    ) -> JobRecord:
        """Apply ``transition`` to the attempt row locked in this transaction; the answer is
        the job as the transition leaves it (its DLQ entry's snapshot when it moved).
        ``effects`` as for :meth:`_apply`."""
        job = job_from_row(row)
        applied, held = await self._apply(conn, [(job.lease, transition)], now=now, effects=effects)
        # The row was locked earlier in the same transaction, so it cannot have changed.
        if not applied:
            raise DatabaseError("a locked job row changed inside its transaction")
        if job.id in held:
            return dlq_from_row(held[job.id]).job
        return transition.apply(job)

    async def close(self) -> None:
        """Close the pool if this engine opened it."""
        if self._owns_pool:
            await self._pool.close()
