"""``AsyncClient``: the asyncio client, including handler registration and the worker."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import typing
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from awa.adapters._pg.pool import PoolOptions
from awa.adapters.clock import SystemClock
from awa.adapters.cron_calendar import parse_cron
from awa.domain.cron import CronSchedule
from awa.domain.descriptors import Descriptor
from awa.domain.errors import AwaError, ValidationTypeError
from awa.domain.job import DEFAULT_QUEUE, JobRecord
from awa.domain.keywords import check_keywords
from awa.domain.queue_options import QueueConfigDict
from awa.domain.schema import schema_compatible
from awa.domain.validation import (
    LEASE_SLOT_COUNT,
    QUEUE_SLOT_COUNT,
    validate_number,
    validate_schema_name,
)
from awa.entrypoints import bootstrap, payloads, telemetry
from awa.entrypoints.args import kind_for_type, rebuild_args, to_json_value
from awa.entrypoints.client_admin import AdminMixin
from awa.entrypoints.client_batch import BatchOpsMixin
from awa.entrypoints.client_cron import CronMixin, build_schedule
from awa.entrypoints.client_descriptors import (
    DescriptorOptions,
    DescriptorsMixin,
    build_descriptor,
    check_descriptor_queues,
    declared,
    with_served,
)
from awa.entrypoints.client_overrides import OverridesMixin
from awa.entrypoints.client_results import ResultsMixin
from awa.entrypoints.health import HealthListener, addr_from_env
from awa.entrypoints.insert_options import PeriodicOptions
from awa.entrypoints.job import Job
from awa.entrypoints.results import HealthCheck, QueueHealth
from awa.entrypoints.task_options import TaskOptions, WorkerOptions, policy_parts
from awa.runtime import AttemptContext, HandlerRegistry, Runtime, RuntimeConfig, parse_start_args
from awa.runtime.config import StartOptions
from awa.runtime.cron import CronService
from awa.runtime.descriptors import DescriptorService

if TYPE_CHECKING:
    from awa.entrypoints.client import RawClient

log = logging.getLogger("awa.client")

T = TypeVar("T")
R = TypeVar("R")
#: A handler for args of type ``T``: takes the ``Job[T]``, returns ``R`` (``None``, a
#: handler result such as ``Snooze``, or a coroutine of one for ``async def``).
Handler = Callable[[Job[T]], R]

#: How long a readiness probe waits for the database.
_PROBE_TIMEOUT = 2.0


def _job_factory(args_type: type[Any]) -> Callable[[JobRecord, AttemptContext], Job[Any]]:
    def build(record: JobRecord, context: AttemptContext) -> Job[Any]:
        return Job(record, rebuild_args(args_type, record.args), context)

    return build


def _result_decoder(handler: Any) -> Callable[[Any], Any] | None:
    """Rebuilds a stored result as the structured type (dataclass, attrs class, pydantic
    model) ``handler``'s return annotation names, as args are; ``None`` for any other
    annotation or none."""
    try:
        returns = typing.get_type_hints(handler).get("return")
    except Exception:  # an annotation that does not resolve here: the JSON value
        return None
    if not isinstance(returns, type) or not payloads.is_structured_type(returns):
        return None
    return functools.partial(payloads.from_json_value, returns)


def _result_json(value: Any) -> Any:
    """A handler's return value as JSON-shaped data, converted as args are."""
    return to_json_value(value, field="result")


class ClientStartOptions(StartOptions, total=False):
    """The keywords of :meth:`AsyncClient.start`: the runtime's, and its own."""

    health_addr: str | None
    listen_database_url: str | None


class AsyncClient(
    CronMixin, OverridesMixin, DescriptorsMixin, AdminMixin, BatchOpsMixin, ResultsMixin
):
    """The asyncio client: enqueue, administer, and run workers.

    ``AsyncClient(database_url, max_connections=10)`` connects on first use (a wrong
    URL raises ``DatabaseError`` there); use ``async with`` (or ``await close()``) to
    release connections.

    ``pooler`` (default ``$AWA_POOLER``, else ``"auto"``) says what ``database_url``
    points at: ``"auto"`` finds out on every new connection, ``"direct"`` is Postgres
    itself or a session-mode pooler, ``"transaction"`` a transaction-mode pooler (PgBouncer
    ``pool_mode = transaction``), where nothing is kept in a session (ADR 0015).
    """

    def __init__(
        self,
        database_url: str,
        max_connections: int = 10,
        *,
        pool_options: PoolOptions | None = None,
        pooler: str | None = None,
    ) -> None:
        super().__init__(database_url, max_connections, pool_options=pool_options, pooler=pooler)
        self._use_handlers(HandlerRegistry(self._policies))
        self._schedules: dict[str, CronSchedule] = {}
        self._queue_descriptors: dict[str, Descriptor] = {}
        self._kind_descriptors: dict[str, Descriptor] = {}
        self._runtime: Runtime | None = None
        self._runtime_resources: bootstrap.RuntimePorts | None = None
        # The runtime being shut down (health reports it draining) and whether
        # shutdown() was called since the last start().
        self._draining: Runtime | None = None
        self._shut_down = False
        self._health: HealthListener | None = None

    def _use_handlers(self, handlers: HandlerRegistry) -> None:
        """Run ``handlers``, and give this client's engines their per-kind policies (the
        registry they carry): the one place a client's handlers and policies are bound,
        for a new client and for a test client running an application's handlers."""
        self._handlers = handlers
        self._policies = handlers.policies

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ handlers
    def task(
        self, args_type: type[T], **options: Unpack[TaskOptions]
    ) -> Callable[[Handler[T, R]], Handler[T, R]]:
        """Register the decorated function (``async def`` or plain ``def``) as the
        handler for ``args_type``'s kind; it receives a ``Job`` whose ``args`` is an
        ``args_type`` instance. A type checker refuses a handler that takes no job or a
        ``Job`` of another args class.

        The keywords are :class:`~awa.entrypoints.task_options.TaskOptions`: ``kind``
        (default: from ``args_type``), ``queue`` (default ``"default"``), the kind's
        policies and ``store_result``.

        ``retry``: the kind's :class:`~awa.RetryPolicy` (attempt budget, backoff, jitter,
        longest delay), used for its handler failures and, by the maintenance leader of
        a process that registered it, for its rescues; ``None`` keeps awa-pg's retry.

        ``store_result``: store what the handler returns when it completes (JSON data,
        or a dataclass, attrs class or pydantic model converted as args are; at most
        1 MiB of JSON, a larger or non-JSON result fails the attempt saying so) for
        :meth:`wait_for`, kept seven days after it was stored."""
        check_keywords(f"{type(self).__name__}.task", options, TaskOptions)
        store_result = options.get("store_result", False)
        queue = options.get("queue", DEFAULT_QUEUE)
        if not isinstance(store_result, bool):
            raise ValidationTypeError(
                "store_result", f"must be True or False, got {type(store_result).__name__}"
            )
        if not isinstance(args_type, type):
            raise TypeError(f"args_type must be a class, got {type(args_type).__name__}")
        policies = policy_parts(options)
        resolved = kind_for_type(args_type, options.get("kind"))

        def decorator(handler: Handler[T, R]) -> Handler[T, R]:
            self._handlers.register(
                resolved,
                handler,
                queue=queue,
                job_factory=_job_factory(args_type),
                result_encoder=_result_json if store_result else None,
                result_decoder=_result_decoder(handler) if store_result else None,
            )
            self._handlers.policies.update(resolved, policies)
            return handler

        return decorator

    def worker(
        self, args_type: type[T], **options: Unpack[WorkerOptions]
    ) -> Callable[[Handler[T, R]], Handler[T, R]]:
        """Deprecated alias of :meth:`task` (without ``store_result``)."""
        check_keywords(f"{type(self).__name__}.worker", options, WorkerOptions)
        warnings.warn(
            "client.worker() is deprecated, use client.task() instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.task(args_type, **options)

    def periodic(
        self,
        name: str,
        cron_expr: str,
        args_type: type[T],
        args: T,
        **options: Unpack[PeriodicOptions],
    ) -> None:
        """Declare a periodic job: ``cron_expr`` (5 fields, or 6 with seconds first) in
        the IANA zone ``timezone`` enqueues ``args`` as a job of ``args_type``'s kind.

        Checked now: a bad expression, zone, priority, attempt count or policy raises
        ``ValidationError`` here. ``start()`` stores the schedule in ``awa.cron_jobs``
        (and again every minute); declaring a name twice keeps the last declaration.
        ``missed_fire_policy``: ``"coalesce"`` enqueues only the latest missed fire,
        ``"catch_up"`` every one (at most 1 000 per second of evaluation).
        """
        schedule = build_schedule(
            f"{type(self).__name__}.periodic", name, cron_expr, args_type, args, options
        )
        self._schedules[name] = schedule

    def queue_descriptor(self, queue: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe a queue this runtime serves, for operators (admin UI, catalogs).

        ``start()`` stores it in ``awa.queue_descriptors`` and refreshes it every snapshot
        tick; it refuses a queue the runtime does not serve and, with ``DatabaseError``,
        fields over the limits (display name and owner 200 characters, description 2 000,
        docs URL 2 048, 20 tags). Declaring a queue twice keeps the last declaration; after
        ``start()`` it raises ``AwaError`` (the runtime read the declarations then)."""
        self._refuse_while_running("queue_descriptor")
        self._queue_descriptors[queue] = build_descriptor(
            f"{type(self).__name__}.queue_descriptor", options
        )

    def job_kind_descriptor(self, kind: str, **options: Unpack[DescriptorOptions]) -> None:
        """Describe a job kind (stored in ``awa.job_kind_descriptors`` by ``start()``,
        with the same limits as :meth:`queue_descriptor`)."""
        self._refuse_while_running("job_kind_descriptor")
        self._kind_descriptors[kind] = build_descriptor(
            f"{type(self).__name__}.job_kind_descriptor", options
        )

    def _refuse_while_running(self, method: str) -> None:
        # start() stores the declarations once; a later one would never reach the catalog.
        if self._runtime is not None and self._runtime.running:
            raise AwaError(f"{method}() must be called before start()")

    # ------------------------------------------------------------------ runtime
    def handler_queues(self) -> list[str]:
        """The queues that have at least one registered handler, sorted."""
        return sorted(self._handlers.queues())

    async def start(
        self,
        queues: Sequence[tuple[str, int] | QueueConfigDict] | None = None,
        **options: Unpack[ClientStartOptions],
    ) -> None:
        """Start the worker runtime on the current event loop; returns once dispatching.

        ``queues`` is ``[(name, max_workers)]`` or a list of queue-config dicts; ``None``
        serves every handler queue with 10 workers. ``queues`` must list every queue a
        handler is registered for, unless ``only_listed_queues=True``: then exactly the
        listed queues are served and the other handlers do not run in this process.
        Bad configuration raises ``ValueError`` / ``TypeError`` naming the field.

        One worker of the fleet leads maintenance (promotion, rescue, cron, prune) under a
        lease of ``leader_lease_ttl_ms`` (default 6000) that it renews every third of it;
        a leader that stops renewing is replaced within about that long. Maintenance runs
        on a thread of its own, so a blocking handler cannot starve it.

        ``health_addr`` (default ``$AWA_HEALTH_ADDR``) is ``HOST:PORT`` for the health
        listener (``/healthz``, ``/readyz``, ``/metrics``); it listens from before the
        runtime starts until after it has shut down. Port 0 picks a free port
        (:attr:`health_address` tells which).

        ``listen_database_url`` (default ``$AWA_LISTEN_DATABASE_URL``, else the client's
        URL) is where the runtime listens for wake-ups: give a direct or session-mode
        connection when ``database_url`` goes through a transaction-mode pooler. Without
        one that works, the runtime finds out at start (a test notification does not come
        back), logs a WARNING and wakes by polling at ``poll_interval_ms``; ``/readyz``
        reports ``"wakeups": "listen"`` or ``"polling"``.

        Successful completions are written in batches: ``completion_flush_ms`` (default
        ``$AWA_COMPLETION_FLUSH_MS``, else 1) is how long a completion waits for others to
        join it, ``completion_batch_size`` (default ``$AWA_COMPLETION_BATCH_SIZE``, else
        512) the most one flush writes.
        """
        if self._runtime is not None and self._runtime.running:
            raise AwaError("the worker runtime is already running")
        check_keywords(f"{type(self).__name__}.start", options, ClientStartOptions)
        health_addr = options.pop("health_addr", None)
        listen_database_url = options.pop("listen_database_url", None)
        runtime_options: StartOptions = options
        config = parse_start_args(queues, handler_queues=self._handlers.queues(), **runtime_options)
        listen_url = listen_database_url or bootstrap.listen_url_from_env()
        if listen_url is not None:
            listen_url = bootstrap.normalize_url(listen_url)
        if config.queue_storage_schema not in (None, "awa"):
            await self._check_queue_storage_schema(config.queue_storage_schema)
        addr = health_addr if health_addr is not None else addr_from_env()
        listener = HealthListener(addr, self._readiness, _prometheus()) if addr else None
        check_descriptor_queues(self._queue_descriptors, {q.name for q in config.queues})
        wiring = await self._wiring()
        await bootstrap.check_connection_limits(wiring, self._max_connections)
        if listener is not None:
            self._shut_down = False
            await listener.start()
            self._health = listener
        try:
            await self._start_runtime(wiring, config, listen_url)
        except BaseException:
            if listener is not None:
                self._health = None
                await listener.close()
            raise

    @property
    def health_address(self) -> tuple[str, int] | None:
        """The health listener's bound ``(host, port)``, or ``None`` without one."""
        return None if self._health is None else self._health.address

    async def _start_runtime(
        self, wiring: bootstrap.Wiring, config: RuntimeConfig, listen_url: str | None = None
    ) -> None:
        served = {q.name for q in config.queues}
        handled = {entry.kind for entry in self._handlers if entry.queue in served}
        queue_descriptors = declared("queue", with_served(self._queue_descriptors, served))
        kind_descriptors = declared("job_kind", with_served(self._kind_descriptors, handled))
        clock = SystemClock()
        ports = await bootstrap.open_runtime_ports(
            wiring,
            clock=clock,
            transition_role=config.storage_transition_role,
            listen_url=listen_url,
        )
        cron = CronService(wiring.control.cron, parse_cron, clock, list(self._schedules.values()))
        descriptors = DescriptorService(
            wiring.control.descriptors,
            clock,
            queue_descriptors,
            kind_descriptors,
            sync_interval=config.snapshot_interval,
        )
        try:
            await cron.sync()
            await descriptors.sync()
        except BaseException:
            await ports.close()
            raise
        runtime = Runtime(
            wiring.engine,
            ports.notifier,
            ports.leader_lock,
            clock,
            self._handlers,
            config,
            runtime_registry=ports.registry,
            heartbeat_engine_factory=bootstrap.heartbeat_engine_factory(wiring),
            maintenance_engine_factory=bootstrap.maintenance_engine_factory(wiring),
            control=wiring.control,
            max_connections=self._max_connections,
            cron=cron,
            descriptors=descriptors,
        )
        self._shut_down = False
        try:
            await runtime.start()
        except BaseException:
            await ports.close()
            raise
        self._runtime = runtime
        self._runtime_resources = ports

    async def install_queue_storage(
        self,
        *,
        schema: str = "awa",
        queue_slot_count: int = QUEUE_SLOT_COUNT,
        lease_slot_count: int = LEASE_SLOT_COUNT,
        reset: bool = False,
    ) -> None:
        """As :meth:`ClientCore.install_queue_storage`, refused while this client's worker
        runtime runs: its dispatchers hold the engine that the install would replace."""
        if self._runtime is not None and self._runtime.running:
            raise AwaError(
                "cannot install queue storage while the worker runtime is running; "
                "call shutdown() first"
            )
        await super().install_queue_storage(
            schema=schema,
            queue_slot_count=queue_slot_count,
            lease_slot_count=lease_slot_count,
            reset=reset,
        )

    async def _check_queue_storage_schema(self, schema: str) -> None:
        """The runtime works on the queue-storage schema the storage transition names, so a
        ``queue_storage_schema`` that is not that schema is refused, never ignored; a name
        no schema can have is refused first, naming the schema-name rule."""
        validate_schema_name(schema, "queue_storage_schema")
        status = json.loads(await self.storage_status())
        named = (status.get("details") or {}).get("schema") or "awa"
        if status.get("state") == "canonical" or named != schema:
            raise ValueError(
                f"queue_storage_schema={schema!r}: this database's queue storage is "
                f"{named!r} (storage state {status.get('state')!r}). Prepare that schema "
                f"(`awa storage prepare-queue-storage-schema` then `awa storage prepare "
                f'--engine queue_storage --details \'{{"schema": "{schema}"}}\'`), '
                f"or leave the keyword out"
            )

    async def shutdown(self, timeout_ms: int = 2000) -> None:
        """Stop claiming, let running handlers finish for up to ``timeout_ms``, then cancel
        the rest and release their attempts. The connection pool stays open."""
        # Checked before anything is torn down: a bad timeout must leave the worker running.
        validate_number("timeout_ms", timeout_ms, allow_infinity=True)
        runtime, self._runtime = self._runtime, None
        ports, self._runtime_resources = self._runtime_resources, None
        listener, self._health = self._health, None
        self._shut_down = True
        self._draining = runtime
        try:
            if runtime is not None:
                await runtime.shutdown(timeout_ms)
        finally:
            self._draining = None
            try:
                if ports is not None:
                    await ports.close()
            finally:
                if listener is not None:
                    await listener.close()

    async def _readiness(self) -> dict[str, Any]:
        """The ``/readyz`` report, one flat object as the Deployment guide names it:
        ``postgres_connected``, ``schema_version``, ``expected_schema_version``,
        ``schema_compatible``, ``poll_loop_alive``, ``heartbeat_alive``,
        ``maintenance_alive``, ``shutting_down`` and ``leader`` (informational), plus
        ``ready`` (every check passes and it is not shutting down) and ``failing`` (the
        checks that keep it from being ready)."""
        runtime = self._runtime or self._draining
        expected = bootstrap.current_migration_version()
        version: int | None = None
        try:
            wiring = await self._pool_wiring()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can lose a cancel that lands
            # as the inner call finishes, and a shutdown would wait on.
            async with asyncio.timeout(_PROBE_TIMEOUT):
                postgres = await bootstrap.ping(wiring)
            if postgres:
                async with asyncio.timeout(_PROBE_TIMEOUT):
                    version = await bootstrap.schema_version(wiring)
        except Exception:
            postgres = False
        checks = {
            "postgres_connected": postgres,
            "schema_compatible": version is not None and schema_compatible(version, expected),
        }
        if runtime is None:
            checks.update(
                poll_loop_alive=False,
                heartbeat_alive=False,
                maintenance_alive=False,
                shutting_down=self._shut_down,
            )
        else:
            checks.update(runtime.readiness())
        failing = sorted(name for name, ok in checks.items() if ok is (name == "shutting_down"))
        return {
            "postgres_connected": checks["postgres_connected"],
            "schema_version": version,
            "expected_schema_version": expected,
            "schema_compatible": checks["schema_compatible"],
            "poll_loop_alive": checks["poll_loop_alive"],
            "heartbeat_alive": checks["heartbeat_alive"],
            "maintenance_alive": checks["maintenance_alive"],
            "shutting_down": checks["shutting_down"],
            "leader": runtime is not None and runtime.is_leader,
            "ready": not failing,
            "failing": failing,
            "wakeups": None if runtime is None else runtime.wakeups,
        }

    async def health_check(self) -> HealthCheck:
        """Health of the database connection and, when started, the worker runtime (on a
        database that was never migrated: unhealthy, with Postgres connected)."""
        wiring = await self._pool_wiring()
        connected = await bootstrap.ping(wiring)
        runtime = self._runtime or self._draining
        if runtime is None:
            return HealthCheck(
                healthy=False,
                postgres_connected=connected,
                poll_loop_alive=False,
                heartbeat_alive=False,
                shutting_down=self._shut_down,
                leader=False,
                queues={},
            )
        health = runtime.health()
        return HealthCheck(
            healthy=health.healthy and connected,
            postgres_connected=health.postgres_connected and connected,
            poll_loop_alive=health.poll_loop_alive,
            heartbeat_alive=health.heartbeat_alive,
            shutting_down=health.shutting_down or self._shut_down,
            leader=health.leader,
            queues={
                name: QueueHealth(
                    in_flight=q.in_flight,
                    available=q.available,
                    max_workers=q.max_workers,
                    min_workers=q.min_workers,
                    weight=q.weight,
                    overflow_held=q.overflow_held,
                )
                for name, q in health.queues.items()
            },
        )

    @property
    def _raw(self) -> RawClient:
        """This client seen as a :class:`~awa.RawClient`, as awa-pg's ``AsyncClient._raw``
        (its examples and tests reach it): the same pool, handlers and runtime, plus the
        blocking ``*_sync`` methods. Closed with this client."""
        from awa.entrypoints.client import RawClient

        if isinstance(self, RawClient):
            return self
        view = self.__dict__.get("_raw_view")
        if not isinstance(view, RawClient):
            view = RawClient.__new__(RawClient)
            # One state, two faces: what either changes, the other sees.
            view.__dict__ = self.__dict__
            view._twin = None
            view._twin_args = (self._url, self._max_connections)
            self.__dict__["_raw_view"] = view
        return view

    async def close(self) -> None:
        """Stop the worker (if started) and close every connection. Idempotent; any later
        database call raises ``DatabaseError``."""
        try:
            if self._runtime is not None:
                await self.shutdown()
        finally:
            try:
                await self._close_storage()
            finally:
                view = self.__dict__.get("_raw_view")
                if view is not None and view is not self:
                    # The raw view's blocking twin, if a *_sync call made one.
                    await asyncio.to_thread(view.close_sync)


def _prometheus() -> Callable[[], tuple[bytes, str]] | None:
    """``GET /metrics`` for the health listener, attached before the runtime records
    anything; ``None`` (the listener answers 501) without the ``otel`` extra."""
    try:
        telemetry.enable_prometheus()
    except telemetry.TelemetryUnavailable as exc:
        log.info("GET /metrics is disabled: %s", exc)
        return None
    return telemetry.prometheus_text
