"""The async client core: connection lifecycle, enqueue, schema and job administration."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Unpack

import attrs

from awa.adapters._pg.pool import PoolOptions
from awa.adapters.clock import SystemClock
from awa.domain import batches
from awa.domain.admin_views import listed_queues
from awa.domain.batches import BatchCounts
from awa.domain.errors import DatabaseError, JobNotFound
from awa.domain.job import DEFAULT_QUEUE
from awa.domain.keywords import check_keywords
from awa.domain.kind_policies import KindPolicies
from awa.domain.lifecycle import operator_retry_applies
from awa.domain.states import TERMINAL_STATES, JobState
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES, validate_stripe_count
from awa.domain.validation import (
    LEASE_SLOT_COUNT,
    QUEUE_SLOT_COUNT,
    validate_job_id,
    validate_schema_name,
    validate_slot_counts,
    validate_text,
)
from awa.entrypoints import bootstrap, payloads
from awa.entrypoints.args import (
    build_spec,
    build_specs,
    to_json_value,
    unique_key_for,
    with_parents,
)
from awa.entrypoints.bootstrap import ClientEngine, Wiring
from awa.entrypoints.held_back import held_back_of, rate_limited_by_queue
from awa.entrypoints.insert_options import (
    ClientBulkInsertOptions,
    ClientInsertOptions,
    InsertOptions,
)
from awa.entrypoints.job import Job
from awa.entrypoints.results import QueueStat, RetryFailedResult
from awa.entrypoints.transaction import Transaction
from awa.ports.admin import SchemaAdmin
from awa.ports.control_plane import ControlPlane
from awa.ports.runtime_registry import RuntimeRegistry
from awa.ports.storage import JobFilter, StorageEngine
from awa.runtime import metrics, tracing

CLOSED = "attempted to acquire a connection on a closed pool"
NO_TRANSITION_FUNCTIONS = (
    "the database has no storage transition functions (schema older than 200): run migrate()"
)


def not_found(job_id: int) -> JobNotFound:
    return JobNotFound(job_id)


def parse_state(state: str | int | JobState) -> JobState:
    try:
        return JobState.parse(state)
    except (ValueError, KeyError):
        raise ValueError(f"unknown job state: {state}") from None


def _positive(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{field} must be >= 1, got {value}")
    return value


class ClientCore:
    """Connection handling shared by every async client method.

    Construction opens no connection, so importing a module that builds a client needs
    no database: a malformed URL raises ``DatabaseError`` right away, an unreachable one
    at the first call that needs the database. The engine and its pool open on first use
    in the caller's event loop.
    """

    def __init__(
        self,
        database_url: str,
        max_connections: int = 10,
        *,
        pool_options: PoolOptions | None = None,
        pooler: str | None = None,
    ) -> None:
        if not isinstance(database_url, str) or not database_url:
            raise ValueError("database_url must be a non-empty string")
        _positive("max_connections", max_connections)
        # SQLAlchemy-style URLs (``postgresql+psycopg://``) are accepted as libpq URLs.
        database_url = bootstrap.normalize_url(database_url)
        bootstrap.check_url(database_url)
        bootstrap.declare_pooler(database_url, pooler)
        self._init_state(database_url, max_connections, pool_options)

    def _init_state(
        self, database_url: str, max_connections: int, pool_options: PoolOptions | None = None
    ) -> None:
        self._url = database_url
        self._max_connections = max_connections
        self._pool_options = pool_options
        # The per-kind policies (``task(retry=...)``) every engine of this client reads.
        self._policies = KindPolicies()
        self._wiring_obj: Wiring | None = None
        self._schema_checked = False
        self._open_lock: asyncio.Lock | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def database_url(self) -> str:
        return self._url

    async def _wiring(self) -> Wiring:
        """The wiring, on a database migrated far enough for the engine (checked until it
        is, so a ``migrate()`` later on is picked up)."""
        wiring = await self._pool_wiring()
        if not self._schema_checked:
            await bootstrap.require_schema(wiring)
            self._schema_checked = True
        return wiring

    async def _pool_wiring(self) -> Wiring:
        """The wiring, whatever the schema: for what needs only the connection pool
        (client transactions, the health check)."""
        if self._closed:
            raise DatabaseError(CLOSED)
        if self._wiring_obj is not None:
            return self._wiring_obj
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._closed:
                raise DatabaseError(CLOSED)
            if self._wiring_obj is None:
                self._wiring_obj = await bootstrap.open_wiring(
                    self._url,
                    max_connections=self._max_connections,
                    pool_options=self._pool_options,
                    policies=self._policies,
                )
        return self._wiring_obj

    async def _engine(self) -> ClientEngine:
        return (await self._wiring()).engine

    async def _control(self) -> ControlPlane:
        """The control-plane stores of the client's backend."""
        return (await self._wiring()).control

    async def runtime_registry(self) -> RuntimeRegistry:
        """Where worker runtimes publish their snapshots (read by operator surfaces)."""
        return (await self._control()).registry

    async def schema_admin(self) -> SchemaAdmin:
        """The database schema's own state (migration version, storage transition,
        runtimes) through this client's pool, for operator surfaces."""
        return bootstrap.schema_admin(await self._wiring())

    async def admin_engine(self) -> StorageEngine:
        """The storage engine behind this client, for operator surfaces built on it (the
        admin web) that need reads the Python API does not name."""
        return await self._engine()

    async def admin_control_plane(self) -> ControlPlane:
        """The control-plane stores of this client's backend, for operator surfaces built
        on them (the admin web's queue charts)."""
        return await self._control()

    async def _close_storage(self) -> None:
        self._closed = True
        wiring, self._wiring_obj = self._wiring_obj, None
        if wiring is not None:
            await wiring.close()

    # ------------------------------------------------------------------ enqueue
    async def insert(
        self, args: Any, **options: Unpack[ClientInsertOptions]
    ) -> Job[dict[str, Any]]:
        """Insert one job. The returned ``Job``'s ``args`` is the JSON object as stored
        (as awa-pg returns it; a handler gets ``args`` as an instance of its args class).
        ``run_at`` (any value) makes it ``scheduled``; ``unique_opts``
        raises ``UniqueConflict`` when a live job already holds the same key.
        ``queue_storage_queue_stripe_count`` must match the fleet's: on queue storage the
        job goes to one stripe ``queue#k`` of its queue. The options are
        :class:`~awa.entrypoints.insert_options.ClientInsertOptions`."""
        check_keywords(f"{type(self).__name__}.insert", options, ClientInsertOptions)
        stripes = validate_stripe_count(
            options.pop("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
        )
        with tracing.producer_span(options.get("queue", DEFAULT_QUEUE)):
            depends_on = options.pop("depends_on", None)
            spec_options: InsertOptions = options
            spec = with_parents(build_spec(args, **spec_options), depends_on)
            # build_spec returns a valid spec: the engine does not check it again.
            (record,) = await (await self._engine()).enqueue_many(
                [spec], stripes=stripes, validated=True
            )
            metrics.count_inserted((spec,))
            # As awa-pg: ``job.args`` is the stored JSON object, whatever the caller gave.
            return Job(record)

    async def insert_many_copy(
        self, jobs: list[Any], **options: Unpack[ClientBulkInsertOptions]
    ) -> list[Job[Any]]:
        """Bulk insert; jobs whose unique key is already held are skipped silently."""
        check_keywords(f"{type(self).__name__}.insert_many_copy", options, ClientBulkInsertOptions)
        stripes = validate_stripe_count(
            options.pop("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
        )
        opts = options.pop("opts", None)
        with tracing.producer_span(options.get("queue", DEFAULT_QUEUE), len(jobs)):
            spec_options: InsertOptions = options
            specs = build_specs(jobs, opts=opts, **spec_options)
            if not specs:
                return []
            records = await (await self._engine()).enqueue_many_skip_duplicates(
                specs, stripes=stripes, validated=True
            )
            metrics.count_inserted_of(specs, records)
            return [Job(r) for r in records]

    async def enqueue_many_copy(
        self, jobs: list[Any], **options: Unpack[ClientBulkInsertOptions]
    ) -> int:
        """Bulk insert on the fast path; returns how many jobs were inserted.

        On queue storage the jobs are spread over the queue's stripes ``queue#0 ..
        queue#(N-1)`` (``N = queue_storage_queue_stripe_count``, which must be the fleet's):
        a job with a unique key goes to the stripe of its key, the others round-robin."""
        check_keywords(f"{type(self).__name__}.enqueue_many_copy", options, ClientBulkInsertOptions)
        stripes = validate_stripe_count(
            options.pop("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
        )
        opts = options.pop("opts", None)
        engine = await self._engine()
        with tracing.producer_span(options.get("queue", DEFAULT_QUEUE), len(jobs)):
            spec_options: InsertOptions = options
            specs = build_specs(jobs, opts=opts, **spec_options)
            if not specs:
                return 0
            inserted_count = await engine.enqueue_many_copy(specs, stripes=stripes, validated=True)
            metrics.count_inserted_copy(specs, inserted_count)
            return inserted_count

    async def transaction(self) -> Transaction:
        """Begin a transaction (``async with await client.transaction() as tx``). Its plain
        SQL runs on any database, migrated or not; its job inserts need the schema."""
        wiring = await self._pool_wiring()
        conn = await wiring.acquire()
        return await Transaction.begin(conn, wiring.engine, wiring.release)

    # ------------------------------------------------------------------ schema
    async def migrate(self) -> None:
        """Apply pending schema migrations."""
        if self._closed:
            raise DatabaseError(CLOSED)
        await bootstrap.migrate(self._url)

    async def install_queue_storage(
        self,
        *,
        schema: str = "awa",
        queue_slot_count: int = QUEUE_SLOT_COUNT,
        lease_slot_count: int = LEASE_SLOT_COUNT,
        reset: bool = False,
    ) -> None:
        """Install the queue-storage engine into ``schema`` (migrating first) and make it
        the active engine: producers write there and workers claim there from now on.

        ``reset=True`` empties it: in the default schema ``awa``, which the migrations own,
        every job, DLQ entry and queue setting is deleted; another schema is rebuilt.
        Activation leaves nothing behind, so it raises ``TransitionRefused`` (an
        ``AwaError``; the tables stay installed) while a canonical job still needs a
        worker, a runtime that runs only canonical storage is live, or another active
        queue-storage schema holds jobs; move a live canonical cluster with the staged
        transition (``awa storage prepare`` ...) instead. Finished canonical jobs stay
        readable.
        """
        await self._install_queue_storage(
            schema, queue_slot_count, lease_slot_count, reset=reset and schema != "awa"
        )
        if reset and schema == "awa":
            await (await self._engine()).reset()
        await bootstrap.activate_queue_storage(self._url, schema)
        # This client's engine routes by the transition state it last read.
        await (await self._engine()).status(max_age=0.0)

    async def prepare_queue_storage_schema(
        self,
        *,
        schema: str = "awa",
        queue_slot_count: int = QUEUE_SLOT_COUNT,
        lease_slot_count: int = LEASE_SLOT_COUNT,
    ) -> None:
        """Build the queue-storage tables in ``schema`` ahead of a storage transition
        (idempotent)."""
        await self._install_queue_storage(schema, queue_slot_count, lease_slot_count, reset=False)

    async def _install_queue_storage(
        self, schema: str, queue_slot_count: int, lease_slot_count: int, *, reset: bool
    ) -> None:
        validate_schema_name(schema)
        _positive("queue_slot_count", queue_slot_count)
        _positive("lease_slot_count", lease_slot_count)
        validate_slot_counts(
            schema, {"queue_slot_count": queue_slot_count, "lease_slot_count": lease_slot_count}
        )
        if self._closed:
            raise DatabaseError(CLOSED)
        await bootstrap.install_queue_storage(
            self._url,
            schema,
            queue_slot_count=queue_slot_count,
            lease_slot_count=lease_slot_count,
            reset=reset,
        )

    async def storage_status(self) -> str:
        """The storage transition status as pretty-printed JSON."""
        row = await (await self.schema_admin()).storage_status()
        if row is None:
            raise DatabaseError(NO_TRANSITION_FUNCTIONS)
        return payloads.dumps(row, indent=2)

    # ------------------------------------------------------------------ jobs
    async def get_job(self, job_id: int) -> Job[Any]:
        """The job with this id; raises :class:`~awa.JobNotFound` (an ``AwaError``) when
        there is none: it never existed, or it finished and retention removed it. A job
        moved to the dead-letter queue is returned as it was when it failed (state
        ``failed``), as awa-pg does; ``get_dlq_job`` tells why it was moved. An available
        job a flow-control limit holds back says which in ``job.held_back``."""
        engine = await self._engine()
        record = await engine.get_job(validate_job_id(job_id))
        if record is None:
            entry = await engine.get_dlq(job_id)
            if entry is None:
                raise not_found(job_id)
            record = entry.job
        reasons = await held_back_of(await self._control(), [record], _now())
        return Job(record, held_back=reasons.get(record.id))

    async def get_batch(self, batch_id: int) -> BatchCounts:
        """The progress of the batch ``batch_id`` (its callback job's id, as
        ``awa.Batch.insert`` answers it): ``size`` and how many of its jobs ``completed``,
        ``failed`` and were ``cancelled``, the rest ``pending``, with the callback's id and
        state (``callback_id``, ``callback_state``, ``None`` once the callback's row is
        gone; ADR 0035). The counts are read from the batch's dependency edges, so they
        hold after the jobs' rows were reclaimed, and from the counts stored on the
        batch's row once the edges were pruned (``EDGE_RETENTION`` after the last job
        finished); the batch is forgotten one more retention later.
        Raises :class:`~awa.JobNotFound` when no batch has this id: no such job, or a job
        that is not a batch's callback."""
        batch_id = validate_job_id(batch_id)
        engine = await self._engine()
        record = await engine.get_job(batch_id)
        state = None if record is None else record.state
        if record is None:
            entry = await engine.get_dlq(batch_id)
            if entry is not None:
                record, state = entry.job, JobState.Failed
        relations = (await self._control()).relations
        # The batch's row outlives its callback's (reclaimed, or past retention).
        counts = await relations.batch_counts(batch_id)
        if counts is None:
            if record is None or not batches.is_callback(record.metadata):
                raise JobNotFound(
                    batch_id, hint="no batch has this id (a batch's id is its callback job's)"
                )
            counts = await relations.parent_counts(batch_id)
        return attrs.evolve(counts, callback_id=batch_id, callback_state=state)

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Job[Any]]:
        """Matching jobs, newest (highest id) first. Jobs moved to the dead-letter queue
        are listed too, as they were when they failed (state ``failed``), as awa-pg does
        and as :meth:`get_job` returns them. Each available job a flow-control limit holds
        back says which in ``job.held_back`` (read once per queue and key, not per job)."""
        _positive("limit", limit)
        for field, text in (("kind", kind), ("queue", queue)):
            if text is not None:
                validate_text(field, text)
        job_filter = JobFilter(
            kind=kind, queue=queue, state=None if state is None else parse_state(state)
        )
        engine = await self._engine()
        records = await engine.list_jobs(job_filter, limit=limit)
        dead = await engine.list_dead_lettered(job_filter, limit=limit)
        merged = {record.id: record for record in dead} | {record.id: record for record in records}
        newest = sorted(merged.values(), key=lambda record: record.id, reverse=True)[:limit]
        reasons = await held_back_of(await self._control(), newest, _now())
        return [Job(r, held_back=reasons.get(r.id)) for r in newest]

    async def retry(self, job_id: int) -> Job[Any] | None:
        """Make a failed or cancelled job available now; a job waiting on a callback starts
        afresh (its callback ends). Any other job (completed, running, available, scheduled,
        retryable, or none) raises ``AwaError`` "job not found", as in awa-pg 0.6.9."""
        validate_job_id(job_id)
        engine = await self._engine()
        before = await engine.get_job(job_id)
        if before is None and await engine.get_dlq(job_id) is not None:
            raise JobNotFound(
                job_id,
                hint=f"it is in the dead-letter queue; retry it with retry_from_dlq({job_id}) "
                f"or `awa dlq retry {job_id}`",
            )
        if before is None or not operator_retry_applies(before.state):
            raise not_found(job_id)
        record = await engine.retry_job(job_id)
        if record is None:
            raise not_found(job_id)
        return Job(record)

    async def cancel(self, job_id: int) -> Job[Any] | None:
        """Cancel a job that has not finished; a running handler is told to stop."""
        validate_job_id(job_id)
        engine = await self._engine()
        before = await engine.get_job(job_id)
        if before is None or before.state in TERMINAL_STATES:
            raise not_found(job_id)
        record = await engine.cancel_job(job_id)
        if record is None:
            raise not_found(job_id)
        return Job(record)

    async def cancel_by_unique_key(
        self,
        kind: str,
        *,
        queue: str | None = None,
        args: Any | None = None,
        period_bucket: int | None = None,
    ) -> Job[Any] | None:
        """Cancel the live job whose unique key matches; ``None`` if there is none."""
        payload = None if args is None else to_json_value(args)
        key = unique_key_for(kind, queue=queue, args=payload, period_bucket=period_bucket)
        record = await (await self._engine()).cancel_by_unique_key(key)
        return None if record is None else Job(record)

    async def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> RetryFailedResult:
        """Retry every failed job of one kind or one queue (exactly one must be given)."""
        if (kind is None) == (queue is None):
            raise ValueError("Specify exactly one of kind or queue")
        engine = await self._engine()
        records = await engine.retry_failed(JobFilter(kind=kind, queue=queue))
        jobs: list[Job[Any]] = [Job(r) for r in records]
        # Per queue, as awa-pg: ``None`` by kind, or where retention does not count.
        pruned = None if queue is None else await engine.pruned_failed_count(queue)
        return RetryFailedResult(jobs, len(jobs), pruned)

    async def discard_failed(self, kind: str) -> int:
        """Delete every failed job of ``kind``; returns how many."""
        return await (await self._engine()).discard_failed(kind)

    # ------------------------------------------------------------------ queues
    async def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        """Stop workers claiming from ``queue`` (inserts still work)."""
        validate_text("queue", queue)
        await (await self._engine()).pause_queue(queue, paused_by=paused_by)

    async def resume_queue(self, queue: str) -> None:
        """Let workers claim from ``queue`` again."""
        validate_text("queue", queue)
        await (await self._engine()).resume_queue(queue)

    async def drain_queue(self, queue: str) -> int:
        """Cancel every pending job of ``queue``; returns how many."""
        validate_text("queue", queue)
        return await (await self._engine()).drain_queue(queue)

    async def queue_stats(self) -> list[QueueStat]:
        """Exact per-queue counts of every queue awa-pg lists: those with jobs, those
        whose jobs are all dead-lettered (counted as ``failed``, their state) and those a
        runtime catalogued (served) with no jobs, by name. ``rate_limited`` counts the
        available jobs a queue's fleet-wide rate limit holds back right now, under the
        limit in force (an override set with ``awa queue overrides``, else the live
        workers' ``global_rate_limit``)."""
        engine = await self._engine()
        counts = listed_queues(
            await engine.queue_counts(),
            dict(await engine.dlq_depth_by_queue()),
            [d.name for d in await (await self._control()).descriptors.list_descriptors("queue")],
        )
        now = _now()
        held = await rate_limited_by_queue(
            await self._control(), {c.queue: c.count(JobState.Available) for c in counts}, now
        )
        stats: list[QueueStat] = []
        for c in counts:
            lag = c.lag(now)
            stats.append(
                QueueStat(
                    queue=c.queue,
                    total_queued=c.total_queued,
                    scheduled=c.count(JobState.Scheduled),
                    available=c.count(JobState.Available),
                    retryable=c.count(JobState.Retryable),
                    running=c.count(JobState.Running),
                    failed=c.count(JobState.Failed),
                    waiting_external=c.count(JobState.WaitingExternal),
                    completed_last_hour=c.completed_last_hour,
                    lag_seconds=None if lag is None else lag.total_seconds(),
                    paused=c.paused,
                    rate_limited=held.get(c.queue, 0),
                )
            )
        return stats

    async def flush_admin_metadata(self) -> None:
        """Refresh cached admin metadata. Statistics here are read exactly, so this only
        checks that the database is reachable."""
        await self._engine()


def _now() -> datetime:
    return SystemClock().now()
