"""The storage engine that follows the staged transition (ADR 0007).

:class:`TransitionRoutingEngine` implements :class:`~awa.ports.StorageEngine` over the
canonical engine and the queue-storage engine, both on one connection pool, and picks
between them by the transition state:

* producers read the state inside their own transaction (``awa.storage_producer_schema()``
  takes a shared lock that every transition step takes exclusively), so an insert lands in
  the engine the state names when it commits;
* claims use a state cached for ``refresh_interval`` seconds: canonical until finalize
  (first, to drain it), queue storage from ``mixed_transition`` on. Once the cache is
  older than that, the claim path starts a re-read in the background and keeps using the
  cached state until it lands (one round trip later), so no claim waits on it;
* a mutation of an attempt goes to the engine the attempt was claimed from (remembered per
  job id; otherwise looked up by id, which both engines share);
* maintenance reads the state afresh and runs on every engine the state keeps alive, and
  from ``mixed_transition`` on also moves the waiting canonical backlog into queue storage;
* admin reads and writes consult every engine that can hold the job;
* queue stripes (``queue_storage_queue_stripe_count``, ADR 0006) apply only where the
  route is queue storage: a producer renames its jobs to ``queue#k`` once the route is
  known, and a striped claim takes the logical queue on canonical and one stripe on queue
  storage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Literal, Self, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.cron import PgCronOps
from awa.adapters._pg.descriptors import PgDescriptorOps
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.leader import PostgresLeaderLock
from awa.adapters._pg.migrations import require_schema
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters._pg.overrides import PgOverrideOps
from awa.adapters._pg.pool import DictConnection, PoolOptions, open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_canonical import CanonicalEngine
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.connections import PgUnitOfWork
from awa.adapters.postgres_queue_storage.enqueue import RouteChanged
from awa.domain.admin_views import KindCounts, QueueDepth, StateBucket
from awa.domain.batch_ops import (
    BatchFilter,
    BatchOperation,
    BatchOpState,
    BatchSpec,
    ItemOutcome,
    ItemResult,
)
from awa.domain.callbacks import CallbackExpressions, callback_not_found
from awa.domain.errors import CallbackNotFound, DatabaseError, UniqueConflict, ValidationError
from awa.domain.job import Claim, DlqEntry, JobRecord, JobSpec, QueueCounts, RunLease
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.domain.stripes import StripeRotor, stripe_queues, stripe_specs
from awa.domain.transition import (
    TransitionObservation,
    TransitionRole,
    TransitionState,
    TransitionStatus,
    capability_for_role,
    claims_canonical,
    claims_queue_storage,
    maintains_canonical,
    maintains_queue_storage,
)
from awa.domain.validation import validate_spec
from awa.ports.clock import Clock
from awa.ports.storage import Ack, DlqFilter, JobFilter, Rescued, StorageEngine, UnitOfWork

#: The first schema version with the transition functions.
TRANSITION_SCHEMA_VERSION = 200

#: How long a claim loop trusts the cached state before reading it again.
DEFAULT_REFRESH_INTERVAL = 1.0

log = logging.getLogger("awa.adapters.routing_engine")

Owner = Literal["canonical", "queue_storage"]
T = TypeVar("T")
AnyConnection = psycopg.AsyncConnection[Any]


_INSERT_ONE = (
    b"SELECT j.id, j.run_at, j.created_at FROM awa.insert_job_compat("
    b"%(kind)s, %(queue)s, %(args)s, 'available'::awa.job_state, %(priority)s::smallint, "
    b"%(max_attempts)s::smallint, NULL, %(metadata)s, %(tags)s::text[], NULL, NULL, "
    b"%(ordering_key)s::bytea) j"
)


def _insert_one_params(spec: JobSpec) -> dict[str, Any]:
    return {
        "kind": spec.kind,
        "queue": spec.queue,
        "args": Jsonb(spec.args),
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "metadata": Jsonb(dict(spec.metadata)),
        "tags": list(spec.tags),
        "ordering_key": spec.ordering_key,
    }


class RoutingUnitOfWork:
    """A caller transaction on one connection; the engine it writes to is decided by the
    state read inside it."""

    def __init__(self, owner: object, conn: AnyConnection) -> None:
        self.owner = owner
        self.conn = conn
        self.open = True


COPY_NEEDS_QUEUE_STORAGE = (
    "enqueue_many_copy requires an active queue_storage backend; on canonical storage use "
    "insert_many_copy (or run `awa storage` to move to queue storage)"
)


class TransitionRoutingEngine(PgCronOps, PgOverrideOps, PgDescriptorOps):
    """:class:`~awa.ports.StorageEngine` routing between canonical and queue storage.

    Build it with :meth:`open` (checks the schema) or around an existing pool.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
        owns_pool: bool = False,
    ) -> None:
        self._pool = pool
        self._url = url
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backoff = backoff if backoff is not None else Backoff()
        self._refresh_interval = refresh_interval
        self._owns_pool = owns_pool
        self._canonical = CanonicalEngine(pool, clock=self._clock, backoff=self._backoff)
        self._queue_storage: dict[str, QueueStorageEngine] = {}
        self._status: TransitionStatus | None = None
        self._status_read_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._role = TransitionRole.AUTO
        # Which engine each attempt claimed here came from, until the attempt closes.
        self._owners: dict[int, Owner] = {}
        # Where the next striped batch starts (see awa.domain.stripes.stripe_specs).
        self._stripe_rotor = StripeRotor()
        # The queue-storage schema the last route read sent producers to: inserts without
        # a unique key go there in one round trip, behind an in-transaction route check.
        self._producer_hint: str | None = None
        self._route_known = False
        self._routed_inserts = True
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        max_connections: int = 10,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
        pool_options: PoolOptions | None = None,
    ) -> Self:
        """Open a pool on ``url`` after checking the schema has the transition functions."""
        pool = await open_pool(url, max_connections=max_connections, options=pool_options)
        try:
            async with translated_errors(), pool.connection() as conn:
                await require_schema(conn, minimum=TRANSITION_SCHEMA_VERSION)
        except BaseException:
            await pool.close()
            raise
        return cls(
            pool,
            url,
            clock=clock,
            backoff=backoff,
            refresh_interval=refresh_interval,
            owns_pool=True,
        )

    # ---------------------------------------------------------------- plumbing
    @property
    def pool(self) -> AsyncConnectionPool[DictConnection]:
        return self._pool

    @property
    def canonical(self) -> CanonicalEngine:
        """The canonical engine (shares this engine's pool)."""
        return self._canonical

    def queue_storage(self, schema: str = "awa") -> QueueStorageEngine:
        """The queue-storage engine of ``schema`` (shares this engine's pool)."""
        engine = self._queue_storage.get(schema)
        if engine is None:
            engine = QueueStorageEngine(
                self._pool, self._url, clock=self._clock, backoff=self._backoff, schema=schema
            )
            self._queue_storage[schema] = engine
        return engine

    @property
    def transition_role(self) -> TransitionRole:
        return self._role

    @property
    def storage_capability(self) -> str:
        """What a runtime on this engine reports in ``awa.runtime_instances``."""
        return capability_for_role(self._role).value

    async def bind_transition_role(self, role: TransitionRole | str) -> TransitionStatus:
        """Fix the role of the runtime using this engine and, for a runtime that can run
        queue storage, move a fresh install straight to ``active``. Returns the state."""
        self._role = TransitionRole(role)
        if self._role is not TransitionRole.CANONICAL_DRAIN:
            async with translated_errors(), self._pool.connection() as conn:
                switched = await pg_transition.auto_finalize_if_fresh(conn)
            if switched:
                log.warning(
                    "storage engine switched from canonical to queue storage (schema awa): "
                    "this database held no jobs, DLQ entries or live runtimes, so it needed "
                    "no staged transition; `awa storage status` shows the state"
                )
        return await self.status(max_age=0.0)

    async def status(self, *, max_age: float | None = None) -> TransitionStatus:
        """The transition status, re-read when older than ``max_age`` seconds (default:
        the refresh interval)."""
        limit = self._refresh_interval if max_age is None else max_age
        now = time.monotonic()
        if self._status is None or now - self._status_read_at >= limit:
            async with translated_errors(), self._pool.connection() as conn:
                status = await pg_transition.read_status(conn)
            self._status, self._status_read_at = status, now
            return status
        return self._status

    async def observe_transition(self) -> TransitionObservation:
        """:class:`~awa.ports.storage.TransitionObserver`."""
        async with translated_errors(), self._pool.connection() as conn:
            return await pg_transition.observe(conn)

    async def _hot_status(self) -> TransitionStatus:
        """The status for the claim and completion paths: the cached one, re-read in the
        background once older than the refresh interval (waits only when nothing is cached
        yet or the interval is zero)."""
        status = self._status
        if status is None or self._refresh_interval <= 0:
            return await self.status()
        if time.monotonic() - self._status_read_at >= self._refresh_interval and (
            self._refreshing is None or self._refreshing.done()
        ):
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh_status())
        return status

    async def _refresh_status(self) -> None:
        try:
            await self.status(max_age=0.0)
        except Exception:
            # The next claim past the interval tries again; until then the cache stands.
            log.debug("background transition status refresh failed", exc_info=True)

    def _engine(self, owner: Owner, status: TransitionStatus) -> StorageEngine:
        if owner == "canonical":
            return self._canonical
        return self.queue_storage(status.schema)

    def _read_order(self, status: TransitionStatus) -> list[StorageEngine]:
        """Engines that may hold a job, the likelier first."""
        if status.state is TransitionState.ACTIVE:
            return [self.queue_storage(status.schema), self._canonical]
        if status.state is TransitionState.MIXED_TRANSITION:
            return [self._canonical, self.queue_storage(status.schema)]
        return [self._canonical]

    def _producer_engine(self, status: TransitionStatus) -> StorageEngine:
        schema = status.producer_schema
        return self._canonical if schema is None else self.queue_storage(schema)

    # ---------------------------------------------------------------- units of work
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[RoutingUnitOfWork]:
        """A unit of work on one pooled connection: commit on exit, roll back on error."""
        if self._closed:
            raise DatabaseError("the storage engine is closed")
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            uow = RoutingUnitOfWork(self, conn)
            try:
                yield uow
            finally:
                uow.open = False

    def unit_of_work_for(self, conn: AnyConnection) -> RoutingUnitOfWork:
        """Wrap a caller's connection that is already inside a transaction."""
        return RoutingUnitOfWork(self, conn)

    def _own_uow(self, uow: UnitOfWork) -> RoutingUnitOfWork:
        if not isinstance(uow, RoutingUnitOfWork) or uow.owner is not self:
            raise DatabaseError("the unit of work does not belong to this engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow

    async def _route(self, conn: AnyConnection) -> tuple[StorageEngine, UnitOfWork]:
        """The engine (and a unit of work on ``conn``) new jobs go to, decided inside
        ``conn``'s transaction under the producer lock."""
        if conn.info.transaction_status == TransactionStatus.IDLE and not conn.autocommit:
            # A caller's connection before its first statement: open its transaction now so
            # the producer lock is held until the caller commits.
            await conn.execute("SELECT 1")
        schema = await pg_transition.producer_schema(conn)
        self._producer_hint, self._route_known = schema, True
        if schema is None:
            return self._canonical, self._canonical.unit_of_work_for(conn)
        engine = self.queue_storage(schema)
        return engine, PgUnitOfWork(engine, conn)

    # ---------------------------------------------------------------- producers
    def _striped(
        self, engine: StorageEngine, specs: Sequence[JobSpec], stripes: int
    ) -> Sequence[JobSpec]:
        """``specs`` as the routed engine stores them: renamed to their stripe on queue
        storage, unchanged on canonical (which has no stripes)."""
        if stripes <= 1 or not isinstance(engine, QueueStorageEngine):
            return specs
        return stripe_specs(specs, stripes, self._stripe_rotor)

    async def _append(
        self, engine: StorageEngine, specs: Sequence[JobSpec], uow: UnitOfWork, *, checked: bool
    ) -> list[JobRecord]:
        """``engine.enqueue_many`` in ``uow``; ``checked``: every spec passed
        ``validate_spec`` as it stands (queue storage then does not check it again)."""
        if isinstance(engine, QueueStorageEngine):
            return await engine.enqueue_many(specs, uow=uow, validated=checked)
        return await engine.enqueue_many(specs, uow=uow)

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = 1,
        validated: bool = False,
    ) -> list[JobRecord]:
        """Enqueue ``specs``; with ``stripes > 1`` and queue storage as the route, each
        job goes to one stripe of its queue (``queue#k``). ``validated``: the caller already
        ran ``validate_spec`` on every spec (specs renamed to a stripe are checked again,
        their queue name being new)."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        # Renaming to a stripe makes a new queue name, which the engine checks.
        checked = stripes <= 1
        if not specs:
            return []
        if uow is None:
            hint = self._producer_hint
            if (
                hint is not None
                and self._routed_inserts
                and all(spec.unique_key is None for spec in specs)
            ):
                routed = specs
                if stripes > 1:
                    routed = stripe_specs(specs, stripes, self._stripe_rotor)
                try:
                    return await self.queue_storage(hint).enqueue_many_routed(
                        routed, validated=checked
                    )
                except RouteChanged as changed:
                    self._producer_hint, self._route_known = None, False
                    self._routed_inserts = changed.supported
            if (
                len(specs) == 1
                and stripes <= 1
                and self._single_statement_insert(specs[0])
                # until a route read has told where producers write (below)
                and (self._route_known or not self._routed_inserts)
            ):
                return [await self._insert_one(specs[0])]
            async with translated_errors(), self._pool.connection() as conn, conn.transaction():
                engine, inner = await self._route(conn)
                return await self._append(
                    engine, self._striped(engine, specs, stripes), inner, checked=checked
                )
        own = self._own_uow(uow)
        async with translated_errors():
            engine, inner = await self._route(own.conn)
            return await self._append(
                engine, self._striped(engine, specs, stripes), inner, checked=checked
            )

    def _single_statement_insert(self, spec: JobSpec) -> bool:
        """Whether ``spec`` can take the one-statement insert: an available job without a
        unique key (its conflict needs the holder's id), timed by the database clock."""
        return (
            spec.unique_key is None and spec.run_at is None and isinstance(self._clock, SystemClock)
        )

    async def _insert_one(self, spec: JobSpec) -> JobRecord:
        """Insert one job in one round trip: ``awa.insert_job_compat`` reads the route
        under the producer lock and appends to that engine in the same statement, and the
        statement's transaction is pipelined with it (``BEGIN``, the call, ``COMMIT``)."""
        async with translated_errors(), self._pool.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                cur = await conn.execute(_INSERT_ONE, _insert_one_params(spec))
            row = await cur.fetchone()
        assert row is not None
        return JobRecord(
            id=int(row["id"]),
            kind=spec.kind,
            queue=spec.queue,
            args=spec.args,
            state=JobState.Available,
            priority=spec.priority,
            attempt=0,
            max_attempts=spec.max_attempts,
            run_at=row["run_at"],
            created_at=row["created_at"],
            metadata=dict(spec.metadata),
            tags=tuple(spec.tags),
            unique_key=None,
            unique_states=spec.effective_unique_states,
        )

    async def enqueue_many_skip_duplicates(
        self, specs: Sequence[JobSpec], *, stripes: int = 1, validated: bool = False
    ) -> list[JobRecord]:
        """Enqueue ``specs``, skipping those whose unique key is already held.
        ``validated`` as for :meth:`enqueue_many`."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        if not specs:
            return []
        checked = stripes <= 1
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            engine, inner = await self._route(conn)
            specs = self._striped(engine, specs, stripes)
            try:
                async with conn.transaction():
                    return await self._append(engine, specs, inner, checked=checked)
            except UniqueConflict:
                pass
            # Some key is held (or repeated in the batch): insert one by one, skipping those.
            inserted: list[JobRecord] = []
            for spec in specs:
                try:
                    async with conn.transaction():
                        inserted.extend(await self._append(engine, [spec], inner, checked=checked))
                except UniqueConflict:
                    continue
            return inserted

    async def enqueue_many_copy(
        self, specs: Sequence[JobSpec], *, stripes: int = 1, validated: bool = False
    ) -> int:
        """Bulk insert on queue storage's fast path; returns how many jobs were inserted.
        Jobs whose unique key is already held are skipped. While producers still write to
        canonical storage it raises ``ValidationError`` (as awa-pg does): use
        ``insert_many_copy`` there.

        When no spec carries a unique key, the batch
        streams through the engine's binary ``COPY`` (one staging copy and one append);
        otherwise it goes through :meth:`enqueue_many_skip_duplicates`. Either way the
        route is read inside the inserting transaction, under the producer lock. Both
        paths validate every spec before anything is written (``validated``: the caller
        already did, as for :meth:`enqueue_many`)."""
        if not specs:
            return 0
        unique = any(spec.unique_key is not None for spec in specs)
        checked = validated and stripes <= 1
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            engine, inner = await self._route(conn)
            if not isinstance(engine, QueueStorageEngine):
                raise ValidationError("enqueue_many_copy", COPY_NEEDS_QUEUE_STORAGE)
            if not unique:
                specs = self._striped(engine, specs, stripes)
                return await engine.enqueue_many_copy(specs, uow=inner, validated=checked)
        return len(
            await self.enqueue_many_skip_duplicates(specs, stripes=stripes, validated=validated)
        )

    # ---------------------------------------------------------------- workers
    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        return await self._claim(
            queue, queue, limit=limit, deadline=deadline, aging_interval=aging_interval
        )

    async def claim_stripe(
        self,
        queue: str,
        stripe: int,
        stripes: int,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        """Claim from stripe ``stripe`` of ``stripes`` of the logical ``queue``: its
        physical queue ``queue#stripe`` on queue storage, ``queue`` itself on canonical
        (no stripes there)."""
        physical = stripe_queues(queue, stripes)
        return await self._claim(
            queue,
            physical[stripe % len(physical)],
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
        )

    async def _claim(
        self,
        canonical_queue: str,
        storage_queue: str,
        *,
        limit: int,
        deadline: timedelta | None,
        aging_interval: timedelta | None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        status = await self._hot_status()
        claims: list[Claim] = []
        if claims_canonical(status.state, self._role):
            for claim in await self._canonical.claim(
                canonical_queue, limit=limit, deadline=deadline, aging_interval=aging_interval
            ):
                self._owners[claim.lease.job_id] = "canonical"
                claims.append(claim)
        if len(claims) < limit and claims_queue_storage(status.state, self._role):
            for claim in await self.queue_storage(status.schema).claim(
                storage_queue,
                limit=limit - len(claims),
                deadline=deadline,
                aging_interval=aging_interval,
            ):
                self._owners[claim.lease.job_id] = "queue_storage"
                claims.append(claim)
        return claims

    async def warm_up(self, queues: Sequence[str]) -> None:
        """:class:`~awa.ports.storage.WorkerWarmUp`: warm the queue-storage engine when
        this runtime claims from it."""
        status = await self._hot_status()
        if claims_queue_storage(status.state, self._role):
            await self.queue_storage(status.schema).warm_up(queues)

    async def _owners_of(self, job_ids: Sequence[int]) -> dict[int, Owner]:
        """The engine holding each job: remembered from the claim, else looked up."""
        found: dict[int, Owner] = {}
        unknown = []
        for job_id in job_ids:
            owner = self._owners.get(job_id)
            if owner is None:
                unknown.append(job_id)
            else:
                found[job_id] = owner
        if unknown:
            async with translated_errors(), self._pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT id FROM awa.canonical_jobs WHERE id = ANY(%s)", (unknown,)
                )
                canonical = {int(row["id"]) for row in await cur.fetchall()}
            for job_id in unknown:
                found[job_id] = "canonical" if job_id in canonical else "queue_storage"
        return found

    async def _per_lease(
        self,
        lease: RunLease,
        call: Callable[[StorageEngine], Awaitable[T]],
        *,
        closes: bool,
    ) -> T:
        owner = (await self._owners_of([lease.job_id]))[lease.job_id]
        status = await self._hot_status()
        try:
            return await call(self._engine(owner, status))
        finally:
            if closes:
                self._owners.pop(lease.job_id, None)

    async def _batch(
        self,
        leases: Sequence[RunLease],
        call: Callable[[StorageEngine, list[RunLease]], Awaitable[list[Ack]]],
        *,
        closes: bool,
    ) -> list[Ack]:
        if not leases:
            return []
        owners = await self._owners_of([lease.job_id for lease in leases])
        status = await self._hot_status()
        groups: dict[Owner, list[int]] = {}
        for index, lease in enumerate(leases):
            groups.setdefault(owners[lease.job_id], []).append(index)
        acks: list[Ack] = [Ack.STALE] * len(leases)
        try:
            for owner, indexes in groups.items():
                got = await call(self._engine(owner, status), [leases[i] for i in indexes])
                for index, ack in zip(indexes, got, strict=True):
                    acks[index] = ack
        finally:
            if closes:
                for lease in leases:
                    self._owners.pop(lease.job_id, None)
        return acks

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._batch(leases, lambda e, ls: e.complete(ls), closes=True)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._batch(leases, lambda e, ls: e.heartbeat(ls), closes=False)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        return await self._per_lease(
            lease, lambda e: e.retry(lease, error=error, delay=delay), closes=True
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self._per_lease(lease, lambda e: e.snooze(lease, delay=delay), closes=True)

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self._per_lease(
            lease, lambda e: e.cancel_attempt(lease, reason=reason), closes=True
        )

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        return await self._per_lease(lease, lambda e: e.fail(lease, error=error), closes=True)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        return await self._per_lease(lease, lambda e: e.release(lease, error=error), closes=True)

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        return await self._per_lease(
            lease,
            lambda e: e.update_progress(
                lease, progress=progress, metadata_updates=metadata_updates
            ),
            closes=False,
        )

    # ---------------------------------------------------------------- callbacks
    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        return await self._per_lease(
            lease,
            lambda e: e.register_callback(
                lease, callback_id=callback_id, timeout=timeout, expressions=expressions
            ),
            closes=False,
        )

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        engines = self._read_order(await self.status(max_age=0.0))
        for index, engine in enumerate(engines):
            try:
                return await engine.callback_expressions(callback_id)
            except CallbackNotFound:
                if index == len(engines) - 1:
                    raise
        raise callback_not_found(callback_id)

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        return await self._per_lease(lease, lambda e: e.wait_for_callback(lease), closes=False)

    async def _by_callback(
        self, call: Callable[[StorageEngine], Awaitable[JobRecord]]
    ) -> JobRecord:
        engines = self._read_order(await self.status(max_age=0.0))
        for index, engine in enumerate(engines):
            try:
                return await call(engine)
            except CallbackNotFound:
                if index == len(engines) - 1:
                    raise
        raise callback_not_found("(no engine)")

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        return await self._by_callback(
            lambda e: e.resolve_callback(
                callback_id, action=action, payload=payload, error=error, expression=expression
            )
        )

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        return await self._by_callback(lambda e: e.heartbeat_callback(callback_id, timeout=timeout))

    # ---------------------------------------------------------------- maintenance
    async def move_canonical_backlog(self, *, limit: int = 1000) -> int:
        """Move waiting canonical jobs into queue storage (only once producers write there)."""
        async with translated_errors(), self._pool.connection() as conn:
            return await pg_transition.move_canonical_backlog(conn, limit=limit)

    async def promote_due(self, *, limit: int = 4096) -> int:
        status = await self.status(max_age=0.0)
        moved = 0
        if status.state in (TransitionState.MIXED_TRANSITION, TransitionState.ACTIVE):
            moved = await self.move_canonical_backlog(limit=limit)
        promoted = 0
        if maintains_canonical(status.state):
            promoted += await self._canonical.promote_due(limit=limit)
        if maintains_queue_storage(status.state):
            promoted += await self.queue_storage(status.schema).promote_due(limit=limit)
        return promoted + moved

    async def _maintained(self) -> list[StorageEngine]:
        status = await self.status(max_age=0.0)
        engines: list[StorageEngine] = []
        if maintains_canonical(status.state):
            engines.append(self._canonical)
        if maintains_queue_storage(status.state):
            engines.append(self.queue_storage(status.schema))
        return engines

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_stale_heartbeats(staleness=staleness))
        return rescued

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_expired_deadlines())
        return rescued

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        rescued: list[Rescued] = []
        for engine in await self._maintained():
            rescued.extend(await engine.rescue_expired_callbacks())
        return rescued

    async def cleanup_retention(
        self, *, completed: timedelta, failed: timedelta, batch_size: int = 1000
    ) -> int:
        # Canonical terminal history outlives the transition, so it is always cleaned.
        deleted = 0
        for engine in self._read_order(await self.status(max_age=0.0)):
            deleted += await engine.cleanup_retention(
                completed=completed, failed=failed, batch_size=batch_size
            )
        return deleted

    async def cleanup_dlq(self, *, retention: timedelta, batch_size: int = 1000) -> int:
        return await self._dlq_engine(await self.status(max_age=0.0)).cleanup_dlq(
            retention=retention, batch_size=batch_size
        )

    async def rotate(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: rotate the queue-storage ring
        once producers write there; before that there is nothing to seal."""
        status = await self.status(max_age=0.0)
        if not maintains_queue_storage(status.state):
            return "skipped_idle"
        return await self.queue_storage(status.schema).rotate()

    async def prune(self, *, failed_retention: timedelta) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: prune the oldest queue-storage
        slot once producers write there; before that no slot holds rows."""
        status = await self.status(max_age=0.0)
        if not maintains_queue_storage(status.state):
            return "idle"
        return await self.queue_storage(status.schema).prune(failed_retention=failed_retention)

    async def rotate_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: rotate the queue-storage lease
        ring once producers write there."""
        status = await self.status(max_age=0.0)
        if not maintains_queue_storage(status.state):
            return "skipped_idle"
        return await self.queue_storage(status.schema).rotate_leases()

    async def prune_leases(self) -> str:
        """:class:`~awa.ports.maintenance.RingMaintenance`: prune the oldest queue-storage
        lease slot once producers write there."""
        status = await self.status(max_age=0.0)
        if not maintains_queue_storage(status.state):
            return "idle"
        return await self.queue_storage(status.schema).prune_leases()

    # ---------------------------------------------------------------- admin reads
    async def _first(self, call: Callable[[StorageEngine], Awaitable[T | None]]) -> T | None:
        for engine in self._read_order(await self.status(max_age=0.0)):
            found = await call(engine)
            if found is not None:
                return found
        return None

    async def get_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.get_job(job_id))

    async def list_jobs(self, filter: JobFilter, *, limit: int = 100) -> list[JobRecord]:
        if limit <= 0:
            return []
        merged: dict[int, JobRecord] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for job in await engine.list_jobs(filter, limit=limit):
                merged.setdefault(job.id, job)
        return sorted(merged.values(), key=lambda j: j.id, reverse=True)[:limit]

    async def queue_counts(self) -> list[QueueCounts]:
        merged: dict[str, QueueCounts] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.queue_counts():
                prior = merged.get(item.queue)
                if prior is None:
                    merged[item.queue] = item
                    continue
                counts = dict(prior.counts)
                for state, n in item.counts.items():
                    counts[state] = counts.get(state, 0) + n
                oldest = [t for t in (prior.oldest_available_at, item.oldest_available_at) if t]
                merged[item.queue] = QueueCounts(
                    queue=item.queue,
                    counts=counts,
                    paused=prior.paused or item.paused,
                    completed_last_hour=prior.completed_last_hour + item.completed_last_hour,
                    oldest_available_at=min(oldest) if oldest else None,
                )
        return [merged[q] for q in sorted(merged)]

    async def queue_depths(self) -> list[QueueDepth]:
        # A job lives in one engine at a time: the depths add up.
        merged: dict[str, QueueDepth] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.queue_depths():
                prior = merged.get(item.queue)
                if prior is not None:
                    counts = {
                        s: prior.count(s) + item.count(s) for s in {*prior.counts, *item.counts}
                    }
                    oldest = [t for t in (prior.oldest_available_at, item.oldest_available_at) if t]
                    item = QueueDepth(item.queue, counts, min(oldest) if oldest else None)
                merged[item.queue] = item
        return [merged[q] for q in sorted(merged)]

    async def kind_counts(self) -> list[KindCounts]:
        # A job lives in one engine at a time, so totals add up; the queue count is the
        # largest of the engines' (a kind seen in different queues on each side of a
        # transition is undercounted until the move ends, never overcounted).
        merged: dict[str, KindCounts] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.kind_counts():
                prior = merged.get(item.kind)
                merged[item.kind] = (
                    item
                    if prior is None
                    else KindCounts(
                        kind=item.kind,
                        job_count=prior.job_count + item.job_count,
                        queue_count=max(prior.queue_count, item.queue_count),
                        completed_last_hour=prior.completed_last_hour + item.completed_last_hour,
                    )
                )
        return [merged[k] for k in sorted(merged)]

    async def finalized_timeseries(self, *, window: timedelta) -> list[StateBucket]:
        merged: Counter[tuple[datetime, JobState]] = Counter()
        for engine in self._read_order(await self.status(max_age=0.0)):
            for item in await engine.finalized_timeseries(window=window):
                merged[(item.bucket, item.state)] += item.count
        return [
            StateBucket(bucket=bucket, state=state, count=n)
            for (bucket, state), n in sorted(merged.items(), key=lambda i: (i[0][0], str(i[0][1])))
        ]

    # ---------------------------------------------------------------- admin writes
    async def _every(self, call: Callable[[StorageEngine], Awaitable[None]]) -> None:
        for engine in self._read_order(await self.status(max_age=0.0)):
            await call(engine)

    async def _sum(self, call: Callable[[StorageEngine], Awaitable[int]]) -> int:
        total = 0
        for engine in self._read_order(await self.status(max_age=0.0)):
            total += await call(engine)
        return total

    async def pause_queue(self, queue: str, *, paused_by: str | None = None) -> None:
        await self._every(lambda e: e.pause_queue(queue, paused_by=paused_by))

    async def resume_queue(self, queue: str) -> None:
        await self._every(lambda e: e.resume_queue(queue))

    async def set_queue_dlq(self, queue: str, *, enabled: bool) -> None:
        await self._every(lambda e: e.set_queue_dlq(queue, enabled=enabled))

    async def drain_queue(self, queue: str) -> int:
        return await self._sum(lambda e: e.drain_queue(queue))

    async def cancel_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.cancel_job(job_id))

    async def cancel_by_unique_key(self, unique_key: bytes) -> JobRecord | None:
        return await self._first(lambda e: e.cancel_by_unique_key(unique_key))

    async def retry_job(self, job_id: int) -> JobRecord | None:
        return await self._first(lambda e: e.retry_job(job_id))

    async def retry_failed(self, filter: JobFilter) -> list[JobRecord]:
        retried: list[JobRecord] = []
        for engine in self._read_order(await self.status(max_age=0.0)):
            retried.extend(await engine.retry_failed(filter))
        return retried

    async def discard_failed(self, kind: str) -> int:
        return await self._sum(lambda e: e.discard_failed(kind))

    async def delete_jobs(self, job_ids: Sequence[int]) -> int:
        return await self._sum(lambda e: e.delete_jobs(job_ids))

    # ---------------------------------------------------------------- DLQ
    def _dlq_engine(self, status: TransitionStatus) -> StorageEngine:
        # Schema awa shares awa.dlq_entries between the engines; re-enqueued DLQ jobs must
        # go where producers write, so the producers' engine owns the DLQ.
        return self._producer_engine(status)

    async def _dlq(self) -> StorageEngine:
        return self._dlq_engine(await self.status(max_age=0.0))

    async def move_failed_to_dlq(self, job_id: int, *, reason: str) -> DlqEntry | None:
        return await self._first(lambda e: e.move_failed_to_dlq(job_id, reason=reason))

    async def bulk_move_failed_to_dlq(self, filter: JobFilter, *, reason: str) -> int:
        return await self._sum(lambda e: e.bulk_move_failed_to_dlq(filter, reason=reason))

    async def list_dlq(self, filter: DlqFilter, *, limit: int = 100) -> list[DlqEntry]:
        return await (await self._dlq()).list_dlq(filter, limit=limit)

    async def get_dlq(self, job_id: int) -> DlqEntry | None:
        return await (await self._dlq()).get_dlq(job_id)

    async def dlq_depth(self, queue: str | None = None) -> int:
        return await (await self._dlq()).dlq_depth(queue)

    async def dlq_depth_by_queue(self) -> list[tuple[str, int]]:
        return await (await self._dlq()).dlq_depth_by_queue()

    async def retry_from_dlq(
        self,
        job_id: int,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> JobRecord | None:
        return await (await self._dlq()).retry_from_dlq(
            job_id, run_at=run_at, priority=priority, queue=queue
        )

    async def bulk_retry_from_dlq(self, filter: DlqFilter) -> int:
        return await (await self._dlq()).bulk_retry_from_dlq(filter)

    async def purge_dlq(self, filter: DlqFilter) -> int:
        return await (await self._dlq()).purge_dlq(filter)

    async def purge_dlq_job(self, job_id: int) -> bool:
        return await (await self._dlq()).purge_dlq_job(job_id)

    # ---------------------------------------------------------------- batch operations
    # Targets come from every engine that can hold a queued job; the control rows live in
    # one shared table, reached through the canonical engine.
    async def count_batch_targets(self, filter: BatchFilter) -> int:
        return await self._sum(lambda e: e.count_batch_targets(filter))

    async def list_batch_targets(
        self, filter: BatchFilter, *, after_id: int = 0, limit: int = 100
    ) -> list[JobRecord]:
        merged: dict[int, JobRecord] = {}
        for engine in self._read_order(await self.status(max_age=0.0)):
            for job in await engine.list_batch_targets(filter, after_id=after_id, limit=limit):
                merged.setdefault(job.id, job)
        return sorted(merged.values(), key=lambda j: j.id)[: max(limit, 0)]

    async def apply_batch_change(self, job_id: int, spec: BatchSpec) -> ItemResult:
        for engine in self._read_order(await self.status(max_age=0.0)):
            result = await engine.apply_batch_change(job_id, spec)
            if result.outcome != ItemOutcome.MISSING:
                return result
        return ItemResult(job_id, ItemOutcome.MISSING)

    async def create_batch_operation(
        self, *, spec: BatchSpec, filter: BatchFilter, submitted_by: str | None = None
    ) -> BatchOperation:
        return await self._canonical.create_batch_operation(
            spec=spec, filter=filter, submitted_by=submitted_by
        )

    async def get_batch_operation(self, op_id: str) -> BatchOperation | None:
        return await self._canonical.get_batch_operation(op_id)

    async def list_batch_operations(
        self, *, state: BatchOpState | None = None, limit: int = 100
    ) -> list[BatchOperation]:
        return await self._canonical.list_batch_operations(state=state, limit=limit)

    async def cancel_batch_operation(self, op_id: str) -> BatchOperation | None:
        return await self._canonical.cancel_batch_operation(op_id)

    async def purge_batch_operations(self, *, before: datetime, limit: int = 1000) -> int:
        return await self._canonical.purge_batch_operations(before=before, limit=limit)

    async def next_batch_operation(self, *, runner: str) -> BatchOperation | None:
        return await self._canonical.next_batch_operation(runner=runner)

    async def add_batch_items(self, op_id: str, job_ids: Sequence[int]) -> BatchOperation:
        return await self._canonical.add_batch_items(op_id, job_ids)

    async def start_batch_running(self, op_id: str, *, cursor: dict[str, Any]) -> BatchOperation:
        return await self._canonical.start_batch_running(op_id, cursor=cursor)

    async def pending_batch_items(self, op_id: str, *, limit: int) -> list[int]:
        return await self._canonical.pending_batch_items(op_id, limit=limit)

    async def record_batch_items(
        self, op_id: str, results: Sequence[ItemResult], *, cursor: dict[str, Any]
    ) -> BatchOperation:
        return await self._canonical.record_batch_items(op_id, results, cursor=cursor)

    async def finish_batch_operation(
        self,
        op_id: str,
        *,
        state: BatchOpState,
        last_error: str | None = None,
        retention: timedelta,
    ) -> BatchOperation:
        return await self._canonical.finish_batch_operation(
            op_id, state=state, last_error=last_error, retention=retention
        )

    # ---------------------------------------------------------------- lifecycle
    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """LISTEN on ``channels`` over a dedicated connection (both engines notify alike)."""
        return await PostgresNotifier(self._url).subscribe(channels)

    def leader_lock(self) -> PostgresLeaderLock:
        """A new candidate for the cluster's maintenance leadership."""
        return PostgresLeaderLock(self._url)

    async def reset(self) -> None:
        """Delete every job of both engines, DLQ entries, unique claims and queue settings."""
        status = await self.status(max_age=0.0)
        await self._canonical.reset()
        async with translated_errors(), self._pool.connection() as conn:
            installed = await pg_transition.queue_storage_installed(conn, status.schema)
        if installed:
            await self.queue_storage(status.schema).reset()
        self._owners.clear()

    async def close(self) -> None:
        """Close the pool if this engine opened it (the inner engines share it)."""
        if self._closed:
            return
        self._closed = True
        refreshing, self._refreshing = self._refreshing, None
        if refreshing is not None and not refreshing.done():
            refreshing.cancel()
            await asyncio.wait([refreshing])
        for engine in self._queue_storage.values():
            # Marks them closed without closing the shared pool twice.
            await engine._retire()
        if self._owns_pool:
            await self._pool.close()
