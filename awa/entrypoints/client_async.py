"""``AsyncClient``: the asyncio client, including handler registration and the worker."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from awa.adapters.clock import SystemClock
from awa.domain.errors import AwaError
from awa.domain.job import JobRecord
from awa.entrypoints import bootstrap
from awa.entrypoints.args import kind_for_type, rebuild_args
from awa.entrypoints.client_admin import AdminMixin
from awa.entrypoints.client_batch import BatchOpsMixin
from awa.entrypoints.job import Job
from awa.entrypoints.results import HealthCheck, QueueHealth
from awa.runtime import AttemptContext, HandlerRegistry, Runtime, parse_start_args

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

NO_HANDLERS = "register at least one worker before starting the runtime"


def _job_factory(args_type: type[Any]) -> Callable[[JobRecord, AttemptContext], Job[Any]]:
    def build(record: JobRecord, context: AttemptContext) -> Job[Any]:
        return Job(record, rebuild_args(args_type, record.args), context)

    return build


class AsyncClient(AdminMixin, BatchOpsMixin):
    """The asyncio client: enqueue, administer, and run workers.

    ``AsyncClient(database_url, max_connections=10)`` checks the database is reachable
    immediately; use ``async with`` (or ``await close()``) to release connections.
    """

    def __init__(self, database_url: str, max_connections: int = 10) -> None:
        super().__init__(database_url, max_connections)
        self._handlers = HandlerRegistry()
        self._runtime: Runtime | None = None
        self._runtime_resources: bootstrap.RuntimePorts | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ handlers
    def task(
        self, args_type: type[T], *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[F], F]:
        """Register the decorated function (``async def`` or plain ``def``) as the
        handler for ``args_type``'s kind; it receives a ``Job`` whose ``args`` is an
        ``args_type`` instance."""
        if not isinstance(args_type, type):
            raise TypeError(f"args_type must be a class, got {type(args_type).__name__}")
        resolved = kind_for_type(args_type, kind)

        def decorator(handler: F) -> F:
            self._handlers.register(
                resolved, handler, queue=queue, job_factory=_job_factory(args_type)
            )
            return handler

        return decorator

    def worker(
        self, args_type: type[T], *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[F], F]:
        """Deprecated alias of :meth:`task`."""
        warnings.warn(
            "AsyncClient.worker() is deprecated; use AsyncClient.task() instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.task(args_type, kind=kind, queue=queue)

    # ------------------------------------------------------------------ runtime
    async def start(
        self,
        queues: list[tuple[str, int]] | list[dict[str, Any]] | None = None,
        *,
        poll_interval_ms: int = 200,
        global_max_workers: int | None = None,
        completed_retention_hours: float | None = None,
        failed_retention_hours: float | None = None,
        descriptor_retention_days: float | None = None,
        cleanup_batch_size: int | None = None,
        leader_election_interval_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        promote_interval_ms: int | None = None,
        heartbeat_rescue_interval_ms: int | None = None,
        heartbeat_staleness_ms: int | None = None,
        deadline_rescue_interval_ms: int | None = None,
        callback_rescue_interval_ms: int | None = None,
        terminal_count_rollup_interval_ms: int | None = None,
        queue_storage_schema: str | None = None,
        queue_storage_queue_slot_count: int = 16,
        queue_storage_lease_slot_count: int = 8,
        queue_storage_claim_slot_count: int = 8,
        queue_storage_queue_stripe_count: int = 1,
        queue_storage_queue_rotate_interval_ms: int = 1000,
        queue_storage_lease_rotate_interval_ms: int = 250,
        queue_storage_claim_rotate_interval_ms: int | None = None,
        storage_transition_role: Literal[
            "auto", "canonical_drain", "queue_storage_target"
        ] = "auto",
    ) -> None:
        """Start the worker runtime on the current event loop; returns once dispatching.

        ``queues`` is ``[(name, max_workers)]`` or a list of queue-config dicts; ``None``
        serves every handler queue with 10 workers. Bad configuration raises
        ``ValueError`` / ``TypeError`` naming the field.
        """
        if self._runtime is not None and self._runtime.running:
            raise AwaError("the worker runtime is already running")
        if len(self._handlers) == 0:
            raise ValueError(NO_HANDLERS)
        config = parse_start_args(
            queues,
            handler_queues=self._handlers.queues(),
            poll_interval_ms=poll_interval_ms,
            global_max_workers=global_max_workers,
            completed_retention_hours=completed_retention_hours,
            failed_retention_hours=failed_retention_hours,
            descriptor_retention_days=descriptor_retention_days,
            cleanup_batch_size=cleanup_batch_size,
            leader_election_interval_ms=leader_election_interval_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            promote_interval_ms=promote_interval_ms,
            heartbeat_rescue_interval_ms=heartbeat_rescue_interval_ms,
            heartbeat_staleness_ms=heartbeat_staleness_ms,
            deadline_rescue_interval_ms=deadline_rescue_interval_ms,
            callback_rescue_interval_ms=callback_rescue_interval_ms,
            terminal_count_rollup_interval_ms=terminal_count_rollup_interval_ms,
            queue_storage_schema=queue_storage_schema,
            queue_storage_queue_slot_count=queue_storage_queue_slot_count,
            queue_storage_lease_slot_count=queue_storage_lease_slot_count,
            queue_storage_claim_slot_count=queue_storage_claim_slot_count,
            queue_storage_queue_stripe_count=queue_storage_queue_stripe_count,
            queue_storage_queue_rotate_interval_ms=queue_storage_queue_rotate_interval_ms,
            queue_storage_lease_rotate_interval_ms=queue_storage_lease_rotate_interval_ms,
            queue_storage_claim_rotate_interval_ms=queue_storage_claim_rotate_interval_ms,
            storage_transition_role=storage_transition_role,
        )
        wiring = await self._wiring()
        ports = await bootstrap.open_runtime_ports(
            wiring, transition_role=config.storage_transition_role
        )
        runtime = Runtime(
            wiring.engine,
            ports.notifier,
            ports.leader_lock,
            SystemClock(),
            self._handlers,
            config,
            runtime_registry=ports.registry,
            heartbeat_engine_factory=bootstrap.heartbeat_engine_factory(wiring),
        )
        try:
            await runtime.start()
        except BaseException:
            await ports.close()
            raise
        self._runtime = runtime
        self._runtime_resources = ports

    async def shutdown(self, timeout_ms: int = 2000) -> None:
        """Stop claiming, let running handlers finish for up to ``timeout_ms``, then cancel
        the rest and release their attempts. The connection pool stays open."""
        runtime, self._runtime = self._runtime, None
        ports, self._runtime_resources = self._runtime_resources, None
        try:
            if runtime is not None:
                await runtime.shutdown(timeout_ms)
        finally:
            if ports is not None:
                await ports.close()

    async def health_check(self) -> HealthCheck:
        """Health of the database connection and, when started, the worker runtime."""
        wiring = await self._wiring()
        connected = await bootstrap.ping(wiring)
        runtime = self._runtime
        if runtime is None:
            return HealthCheck(
                healthy=False,
                postgres_connected=connected,
                poll_loop_alive=False,
                heartbeat_alive=False,
                shutting_down=False,
                leader=False,
                queues={},
            )
        health = runtime.health()
        return HealthCheck(
            healthy=health.healthy and connected,
            postgres_connected=health.postgres_connected and connected,
            poll_loop_alive=health.poll_loop_alive,
            heartbeat_alive=health.heartbeat_alive,
            shutting_down=health.shutting_down,
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

    async def close(self) -> None:
        """Stop the worker (if started) and close every connection. Idempotent; any later
        database call raises ``DatabaseError``."""
        try:
            if self._runtime is not None:
                await self.shutdown()
        finally:
            await self._close_storage()
