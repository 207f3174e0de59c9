"""The worker runtime: dispatchers, executors, completion batching, heartbeats,
one listener for wake-ups and cancels, the maintenance leader and runtime snapshots,
wired together."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from awa.domain.channels import CANCEL_CHANNEL
from awa.domain.job import Claim
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.validation import validate_number
from awa.ports.clock import Clock
from awa.ports.control_plane import ControlPlane
from awa.ports.leader import LeaderLock
from awa.ports.notifier import Notifier
from awa.ports.runtime_registry import QueueSnapshot, RuntimeRegistry, RuntimeSnapshot
from awa.ports.storage import StorageEngine, WorkerWarmUp
from awa.runtime import heap, metrics
from awa.runtime.completion import CompletionBatcher
from awa.runtime.config import RuntimeConfig
from awa.runtime.config_checks import config_warnings
from awa.runtime.context import AttemptContext
from awa.runtime.cron import CronService
from awa.runtime.deadlines import DeadlineWatch
from awa.runtime.descriptors import DescriptorService
from awa.runtime.dispatcher import QueueDispatcher
from awa.runtime.executor import Executor
from awa.runtime.handlers import HandlerRegistry
from awa.runtime.heartbeat import EngineFactory, HeartbeatService
from awa.runtime.inflight import InFlight
from awa.runtime.listener import ChannelListener
from awa.runtime.log_throttle import FailureLog
from awa.runtime.loop_watchdog import LoopWatchdog
from awa.runtime.maintenance import BackendFactory, MaintenanceLeader
from awa.runtime.permits import PermitPool
from awa.runtime.wake import Waker

log = logging.getLogger("awa.runtime")

# After the drain timeout handlers are cancelled; this bounds how long releasing takes.
_RELEASE_GRACE = 5.0
#: How long a shutdown waits for the maintenance duty under way to finish.
_MAINTENANCE_GRACE = 5.0
#: How long a snapshot write under way may go on once the runtime stops (see
#: :meth:`Runtime._publish_snapshot`).
_SNAPSHOT_WRITE_GRACE = 5.0
#: A claim loop that has not come round for this long (or 10 polls) is not ticking.
_TICK_WINDOW = 30.0
#: How long start() may spend getting the engine's hot statements ready.
_WARM_UP_LIMIT = 5.0


class _Slot:
    """An idle handler task and the attempt handed to it: ``ready`` is resolved when
    one is. A bare future of the running loop, not an ``anyio.Event`` (which wraps an
    ``asyncio.Event``, whose wait makes a future): the hand-off costs about 4 us instead
    of 6 us of the event loop, once per job."""

    __slots__ = ("context", "ready")

    def __init__(self, ready: asyncio.Future[None]) -> None:
        self.context: AttemptContext | None = None
        self.ready = ready


@attrs.frozen
class QueueHealth:
    """Capacity of one queue. Hard-reserved mode fills ``max_workers``; weighted mode
    fills ``min_workers``, ``weight`` and ``overflow_held``."""

    in_flight: int
    available: int
    max_workers: int | None
    min_workers: int | None
    weight: int | None
    overflow_held: int | None


@attrs.frozen
class RuntimeHealth:
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    shutting_down: bool
    leader: bool
    queues: dict[str, QueueHealth]


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else round(value.total_seconds() * 1000)


def _rate(limit: GlobalRateLimit | None) -> float | None:
    return None if limit is None else limit.rate


def _burst(limit: GlobalRateLimit | None) -> int | None:
    return None if limit is None else limit.burst


class Runtime:
    """One worker process's runtime. ``start()`` returns once every dispatcher listens;
    ``shutdown()`` stops claiming, drains, and releases what did not finish."""

    def __init__(
        self,
        engine: StorageEngine,
        notifier: Notifier | None,
        leader_lock: LeaderLock | None,
        clock: Clock,
        handlers: HandlerRegistry,
        config: RuntimeConfig,
        *,
        runtime_registry: RuntimeRegistry | None = None,
        heartbeat_engine_factory: EngineFactory | None = None,
        maintenance_engine_factory: BackendFactory | None = None,
        control: ControlPlane | None = None,
        max_connections: int | None = None,
        cron: CronService | None = None,
        descriptors: DescriptorService | None = None,
    ) -> None:
        self.engine = engine
        self.notifier = notifier
        self.leader_lock = leader_lock
        self.clock = clock
        self.handlers = handlers
        self.config = config
        self.runtime_registry = runtime_registry
        #: the control-plane stores of the engine's backend (overrides, batch operations,
        #: descriptors and the maintenance thread's cron store come from here)
        self.control = control
        self._snapshot_failures = FailureLog(
            log, "publishing the runtime snapshot", clock=clock.monotonic
        )
        self.heartbeat_engine_factory = heartbeat_engine_factory
        self.max_connections = max_connections
        #: declares this runtime's schedules; the maintenance leader fires stored ones
        self.cron = cron
        #: keeps this runtime's declared descriptors fresh in the catalog tables
        self.descriptors = descriptors
        self.id = str(uuid.uuid4())
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.inflight = InFlight()
        self.deadlines = DeadlineWatch(self.inflight, self.clock)
        self.permits = PermitPool(config.queues, config.global_max_workers)
        self.dispatchers = [
            QueueDispatcher(
                q,
                engine,
                self.permits,
                poll_interval=config.poll_interval,
                spawn=self._spawn,
                stripes=config.queue_storage_queue_stripe_count,
                clock=clock,
                overrides=None if control is None else control.overrides,
                polling=self._polling,
            )
            for q in config.queues
        ]
        self.batcher = CompletionBatcher(
            engine,
            clock=clock,
            batch_size=config.completion_batch_size,
            flush_interval=config.completion_flush_interval,
        )
        self.heartbeat = HeartbeatService(
            engine,
            self.inflight,
            clock=clock,
            interval=config.heartbeat_interval,
            engine_factory=heartbeat_engine_factory,
        )
        #: One subscription for every queue's wake-ups and the cancels.
        self.listener = ChannelListener(notifier, clock=clock) if notifier is not None else None
        if self.listener is not None:
            for dispatcher in self.dispatchers:
                self.listener.route(dispatcher.channels, dispatcher.wake)
            self.listener.route([CANCEL_CHANNEL], self.heartbeat.cancel_announced)
        self.maintenance = (
            MaintenanceLeader(
                engine,
                leader_lock,
                config,
                self.inflight,
                cron=cron,
                clock=clock,
                instance_id=self.id,
                control=control,
                engine_factory=maintenance_engine_factory,
            )
            if leader_lock is not None
            else None
        )
        if self.maintenance is not None:
            self.maintenance.on_leadership = self._leadership_changed
        # Set to publish the snapshot before the interval is up (see _snapshot_loop).
        self._snapshot_due: anyio.Event | None = None
        self._snapshot_loop_of: asyncio.AbstractEventLoop | None = None
        #: names the handler when the event loop is blocked for more than a second
        self.watchdog = LoopWatchdog(self.inflight, clock=clock)
        self._started_at: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._work: TaskGroup | None = None
        self._executor: Executor | None = None
        # Handler tasks waiting for their next attempt (see _slot_loop).
        self._idle_slots: list[_Slot] = []
        # Every handler task's coroutine, for _close_unstarted.
        self._slot_coroutines: list[Coroutine[Any, Any, None]] = []
        self._drained = Waker(clock)
        self._drain_timeout = 2.0
        self._running = False
        self._shutting_down = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        return self._running

    @property
    def wakeups(self) -> str:
        """How idle loops are woken: ``"listen"`` (notifications) or ``"polling"``."""
        return "listen" if self.listener is not None and self.listener.listening else "polling"

    def _polling(self) -> bool:
        """Whether the loops expect notifications and none can reach them now (the
        subscription fell back to polling, or is down): they then follow the work by
        polling (:data:`~awa.runtime.dispatcher.POLL_FOLLOW`)."""
        return self.listener is not None and not self.listener.listening

    @property
    def is_leader(self) -> bool:
        return self.maintenance is not None and self.maintenance.is_leader

    async def start(self) -> None:
        """Start in the background on the current event loop; returns once running."""
        if self._task is not None:
            raise RuntimeError("the runtime is already running")
        for dispatcher in self.dispatchers:
            dispatcher.reset()
        ready = asyncio.Event()

        async def root() -> None:
            async with anyio.create_task_group() as tg:
                await tg.start(self.run)
                ready.set()

        self._task = asyncio.get_running_loop().create_task(root(), name="awa-runtime")
        waiter = asyncio.ensure_future(ready.wait())
        try:
            await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._task.done():
            task, self._task = self._task, None
            task.result()
            raise RuntimeError("the runtime stopped while starting")

    async def _warm_up(self, warmed: anyio.Event) -> None:
        """Let the engine get its claim and completion statements ready (best effort,
        bounded): a cold backend would otherwise slow the first jobs. ``warmed`` is set
        once it is over, however it ended."""
        try:
            if isinstance(self.engine, WorkerWarmUp):
                with self.clock.move_on_after(_WARM_UP_LIMIT):
                    try:
                        await self.engine.warm_up([d.queue for d in self.dispatchers])
                    except Exception:
                        log.debug("warming up the storage engine failed", exc_info=True)
        finally:
            warmed.set()

    async def shutdown(self, timeout_ms: int = 2000) -> None:
        """Stop claiming, let handlers finish for up to ``timeout_ms`` (heartbeats keep
        going), then cancel the rest cooperatively and release their attempts."""
        self._drain_timeout = (
            validate_number("timeout_ms", timeout_ms, allow_infinity=True) / 1000.0
        )
        self.request_stop()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        finally:
            if task.done():
                self._task = None
        task.result()

    def request_stop(self) -> None:
        """Begin shutdown without waiting (no new claims from now on)."""
        self._shutting_down = True
        for dispatcher in self.dispatchers:
            dispatcher.stop()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`request_stop` / :meth:`shutdown`; structured alternative to
        :meth:`start` for callers that own a task group."""
        self._shutting_down = False
        if self.maintenance is not None:
            self.maintenance.rearm()
        self._started_at = self.clock.now()
        threads = self.config.sync_handler_threads or max(1, self.config.total_capacity)
        self._executor = Executor(
            self.engine,
            self.handlers,
            self.batcher,
            clock=self.clock,
            thread_limiter=anyio.CapacityLimiter(threads),
            on_finished=self._finished,
            on_handler_done=self._return_permit,
            results=None if self.control is None else self.control.results,
            relations=None if self.control is None else self.control.relations,
        )
        self._running = True
        for warning in config_warnings(self.config, max_connections=self.max_connections):
            log.warning("configuration: %s", warning)
        instruments = metrics.instruments()
        unregister = None
        frozen = False
        if instruments is not None:
            gauges: dict[str, Callable[[], Iterable[tuple[float, metrics.Key]]]] = {
                "awa.job.in_flight": self._in_flight_by_queue
            }
            if self.descriptors is not None:
                gauges.update(self.descriptors.info_gauges())
            unregister = instruments.add_gauge_sources(gauges)
        try:
            async with anyio.create_task_group() as services:
                # The warm-up first: its connections open and plan while the listener
                # subscribes and the threads open their engines, not after.
                warmed = anyio.Event()
                services.start_soon(self._warm_up, warmed)
                services.start_soon(self.batcher.run)
                services.start_soon(self.heartbeat.run)
                services.start_soon(self.watchdog.run)
                services.start_soon(self.deadlines.run)
                if self.listener is not None:
                    services.start_soon(self.heartbeat.answer_cancels)
                    # Listening before the first claim: a job enqueued once start()
                    # returned is announced to this runtime.
                    await services.start(self.listener.run)
                if self.maintenance is not None:
                    services.start_soon(self.maintenance.run)
                if self.runtime_registry is not None:
                    services.start_soon(self._snapshot_loop)
                if self.cron is not None and self.cron.schedules:
                    services.start_soon(self.cron.sync_loop)
                if self.descriptors is not None and self.descriptors.declares_any:
                    services.start_soon(self.descriptors.sync_loop)
                self._idle_slots = []
                try:
                    async with anyio.create_task_group() as work:
                        self._work = work
                        await warmed.wait()
                        # Started up: what exists now lives as long as the process, and full
                        # collections need not visit it again (awa.runtime.heap).
                        frozen = heap.freeze()
                        async with anyio.create_task_group() as dispatch:
                            for dispatcher in self.dispatchers:
                                await dispatch.start(dispatcher.run)
                            log.info("%s", self.describe_start())
                            # Publish a snapshot now the loops run, so the fleet view (and
                            # `awa health`) does not show this worker unhealthy until the next.
                            services.start_soon(self._publish_snapshot)
                            task_status.started()
                        await self._drain(work)
                        # Every attempt has finished: what is left are idle handler tasks.
                        work.cancel_scope.cancel()
                finally:
                    self._close_unstarted()
                self._work = None
                self._idle_slots = []
                if self.maintenance is not None:
                    # let a maintenance statement under way finish rather than cut it off
                    self.maintenance.stop()
                    with self.clock.move_on_after(_MAINTENANCE_GRACE):
                        await self.maintenance.wait_stopped()
                services.cancel_scope.cancel()
        finally:
            self._running = False
            if frozen:
                heap.thaw()
            if unregister is not None:
                unregister()
            if self._shutting_down:
                with anyio.CancelScope(shield=True):
                    await self._publish_snapshot()
            else:
                # Cancelled without shutdown(): the event loop is closing (asyncio.run
                # ending on an error cancels every task at once, the connection pool's
                # too). Waiting on the database here would hold the program open; the
                # registry row goes stale and the fleet view drops it.
                log.debug("runtime %s cancelled without shutdown(); not publishing", self.id)

    async def _drain(self, work: TaskGroup) -> None:
        # Tell running handlers at once (``job.is_cancelled()``), so cooperative ones can
        # stop early instead of being cut off at the timeout.
        for context in self.inflight.snapshot():
            context.request_cancel()
        with self.clock.move_on_after(self._drain_timeout):
            while len(self.inflight):
                await self._drained.wait(1.0)
        if not len(self.inflight):
            return
        log.info("shutdown timeout: cancelling %d running handlers", len(self.inflight))
        for context in self.inflight.snapshot():
            context.request_cancel()
            if context.cancel_scope is not None:
                context.cancel_scope.cancel()
        with self.clock.move_on_after(max(_RELEASE_GRACE, self._drain_timeout)):
            while len(self.inflight):
                await self._drained.wait(1.0)
        if len(self.inflight):
            log.error(
                "%d attempts did not release in time; rescue will recover them", len(self.inflight)
            )
            work.cancel_scope.cancel()

    def _spawn(self, queue: str, claim: Claim) -> None:
        assert self._work is not None and self._executor is not None
        context = AttemptContext(
            self.engine,
            claim,
            queue=queue,
            clock=self.clock,
            callback_poll_interval=self.config.poll_interval,
        )
        self.inflight.add(context)
        self.deadlines.arm(context)
        while self._idle_slots:
            slot = self._idle_slots.pop()
            # A slot whose task was cancelled while it waited is not handed anything.
            if not slot.ready.done():
                slot.context = context
                slot.ready.set_result(None)
                return
        # The coroutine is made here and kept: a task cancelled before its first step
        # (a script's exception cancels every task at once) never awaits it, and
        # Python would warn at exit about a coroutine never awaited. The work group's
        # exit closes those (_close_unstarted).
        slot_loop = self._slot_loop(context)
        if len(self._slot_coroutines) >= 2 * len(self.inflight) + 64:
            # A handler task ends only when its loop fails: forget those that ended.
            self._slot_coroutines = [
                c
                for c in self._slot_coroutines
                if inspect.getcoroutinestate(c) != inspect.CORO_CLOSED
            ]
        self._slot_coroutines.append(slot_loop)
        self._work.start_soon(_returning, slot_loop)

    def _close_unstarted(self) -> None:
        """Close the handler tasks' coroutines whose task was cancelled before it ran."""
        for coroutine in self._slot_coroutines:
            if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
                coroutine.close()
        self._slot_coroutines = []

    async def _slot_loop(self, context: AttemptContext) -> None:
        """Run attempts one after another in one task. Starting a task in a task group
        costs about ten times more than handing an attempt to a task that waits for one,
        so tasks are kept once started (at most as many as attempts ever ran at once)."""
        assert self._executor is not None
        execute = self._executor.execute
        loop = asyncio.get_running_loop()
        slot = _Slot(loop.create_future())
        current: AttemptContext | None = context
        task = asyncio.current_task()
        while current is not None:
            current.task = task
            await execute(current)
            slot.context = None
            slot.ready = ready = loop.create_future()
            self._idle_slots.append(slot)
            await ready
            current = slot.context

    def _return_permit(self, context: AttemptContext) -> None:
        """The handler is done: its permit may run the next job. The attempt stays in
        flight (heartbeated, awaited by shutdown) until its outcome is acknowledged."""
        if not context.permit_returned:
            context.permit_returned = True
            self.permits.release(context.queue, 1)

    def _finished(self, context: AttemptContext) -> None:
        self.inflight.remove(context)
        self._return_permit(context)
        self._drained.wake()

    def _in_flight_by_queue(self) -> list[tuple[float, metrics.Key]]:
        return [
            (float(self.permits.in_flight(q.name)), ((metrics.ATTR_QUEUE, q.name),))
            for q in self.config.queues
        ]

    def describe_start(self) -> str:
        """The start line: pid, queues with their capacity, and the kinds handled."""
        weighted = self.permits.weighted
        queues = ", ".join(
            f"{q.name}(min={q.min_workers or 0}, weight={q.weight})"
            if weighted
            else f"{q.name}({q.max_workers})"
            for q in sorted(self.config.queues, key=lambda q: q.name)
        )
        kinds = ", ".join(sorted(entry.kind for entry in self.handlers)) or "none"
        mode = f"; global_max_workers={self.config.global_max_workers}" if weighted else ""
        return f"pid {self.pid} started; queues: {queues}{mode}; kinds: {kinds}"

    # ------------------------------------------------------------------ health
    def health(self) -> RuntimeHealth:
        weighted = self.permits.weighted
        queues = {
            q.name: QueueHealth(
                in_flight=self.permits.in_flight(q.name),
                available=self.permits.available(q.name),
                max_workers=None if weighted else q.max_workers,
                min_workers=(q.min_workers or 0) if weighted else None,
                weight=q.weight if weighted else None,
                overflow_held=self.permits.overflow_held(q.name) if weighted else None,
            )
            for q in self.config.queues
        }
        postgres = (
            all(d.last_claim_ok for d in self.dispatchers)
            and self.heartbeat.postgres_ok
            and self.batcher.healthy
        )
        poll_alive = self._running and all(d.alive for d in self.dispatchers)
        heartbeat_alive = self._running and self.heartbeat.alive
        return RuntimeHealth(
            healthy=postgres and poll_alive and heartbeat_alive and not self._shutting_down,
            postgres_connected=postgres,
            poll_loop_alive=poll_alive,
            heartbeat_alive=heartbeat_alive,
            shutting_down=self._shutting_down,
            leader=self.is_leader,
            queues=queues,
        )

    def readiness(self) -> dict[str, bool]:
        """The in-process readiness checks (the database ones are the caller's): every
        claim loop started and ticked within ``max(30 s, 10 polls)``, heartbeat and
        maintenance running, and whether it is shutting down (ready only when not)."""
        now = self.clock.monotonic()
        window = max(_TICK_WINDOW, 10 * self.config.poll_interval)
        loops = self._running and all(
            d.alive and d.last_loop_at is not None and now - d.last_loop_at <= window
            for d in self.dispatchers
        )
        return {
            "poll_loop_alive": loops,
            "heartbeat_alive": self._running and self.heartbeat.alive,
            "maintenance_alive": self._running
            and (self.maintenance is None or self.maintenance.alive),
            "shutting_down": self._shutting_down,
        }

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> RuntimeSnapshot:
        health = self.health()
        weighted = self.permits.weighted
        return RuntimeSnapshot(
            id=self.id,
            hostname=self.hostname,
            pid=self.pid,
            version=self.config.version,
            started_at=self._started_at or self.clock.now(),
            last_seen_at=self.clock.now(),
            leader=health.leader,
            healthy=health.healthy,
            postgres_connected=health.postgres_connected,
            poll_loop_alive=health.poll_loop_alive,
            heartbeat_alive=health.heartbeat_alive,
            shutting_down=health.shutting_down,
            snapshot_interval_ms=int(self.config.snapshot_interval * 1000),
            queues=tuple(
                QueueSnapshot(
                    name=q.name,
                    in_flight=health.queues[q.name].in_flight,
                    max_workers=q.max_workers,
                    min_workers=q.min_workers,
                    weight=q.weight,
                    rate_limit=(
                        None if q.rate_limit is None else (q.rate_limit.rate, q.rate_limit.burst)
                    ),
                    mode="weighted" if weighted else "hard_reserved",
                    global_max_workers=self.config.global_max_workers,
                    poll_interval_ms=round(self.config.poll_interval * 1000),
                    deadline_ms=_ms(q.deadline),
                    aging_interval_ms=_ms(q.aging_interval),
                    claimers=q.claimers,
                    claim_batch_size=q.claim_batch_size,
                    overflow_held=health.queues[q.name].overflow_held,
                    max_running_per_key=q.max_running_per_key,
                    global_rate_per_second=_rate(q.global_rate_limit),
                    global_rate_burst=_burst(q.global_rate_limit),
                    global_rate_per_key_per_second=_rate(q.global_rate_limit_per_key),
                    global_rate_per_key_burst=_burst(q.global_rate_limit_per_key),
                )
                for q in self.config.queues
            ),
            maintenance_alive=self.readiness()["maintenance_alive"],
            queue_descriptor_hashes=(
                {} if self.descriptors is None else self.descriptors.queue_hashes()
            ),
            job_kind_descriptor_hashes=(
                {} if self.descriptors is None else self.descriptors.kind_hashes()
            ),
        )

    async def _publish_snapshot(self) -> None:
        """Write the snapshot to the registry. A write under way when the runtime stops
        goes on (up to ``_SNAPSHOT_WRITE_GRACE``) rather than being cut off: a statement
        the driver abandons can still commit on the server after the registry's goodbye
        (``close()`` deletes the row), and put the row of a runtime that is gone back."""
        if self.runtime_registry is None:
            return
        snapshot = self.snapshot()
        with self.clock.move_on_after(_SNAPSHOT_WRITE_GRACE) as write:
            write.shield = True
            try:
                await self.runtime_registry.upsert_runtime(snapshot)
            except Exception as exc:
                self._snapshot_failures.failed(exc)
            else:
                self._snapshot_failures.succeeded()
        if write.cancelled_caught:
            self._snapshot_failures.failed(
                TimeoutError(f"the snapshot write took over {_SNAPSHOT_WRITE_GRACE:g} s")
            )

    def _leadership_changed(self, leading: bool) -> None:
        """Maintenance took or gave up the lease (on its own thread, maybe): publish the
        snapshot now, so the fleet view and `awa health` name the leader that acts."""
        due, loop = self._snapshot_due, self._snapshot_loop_of
        if due is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the runtime's loop already closed
            loop.call_soon_threadsafe(due.set)

    async def _snapshot_loop(self) -> None:
        self._snapshot_loop_of = asyncio.get_running_loop()
        try:
            while True:
                # A fresh event before publishing: a change while the row is written
                # publishes again.
                self._snapshot_due = due = anyio.Event()
                started = self.clock.monotonic()
                await self._publish_snapshot()
                with self.clock.move_on_after(
                    max(0.0, self.config.snapshot_interval - (self.clock.monotonic() - started))
                ):
                    await due.wait()
        finally:
            self._snapshot_due = self._snapshot_loop_of = None


def _returning(coroutine: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
    """Hand a coroutine made beforehand to ``start_soon``, which takes a function."""
    return coroutine
