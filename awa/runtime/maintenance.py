"""Cluster maintenance run by the single elected leader.

Leadership is a lease (ADR 0014) that this loop renews itself between duties, so a
process that is stopped, blocked or cut off from the database stops renewing and loses
it one ttl after its last renewal. The holder counts the lease on its own monotonic clock
from before each request left and checks it before every action (and between the steps
of a duty): once it has run out, the holder steps down before acting again. With an
engine factory the whole loop runs on a thread of its own with its own event loop and
engine, so a handler that blocks the worker's event loop cannot starve maintenance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread

from awa.domain.leadership import Lease, LeaseLapsed, LeasePolicy
from awa.ports.clock import Clock
from awa.ports.control_plane import Backend, ControlPlane
from awa.ports.leader import LeaderLock
from awa.ports.storage import StorageEngine
from awa.runtime import metrics
from awa.runtime.config import RuntimeConfig
from awa.runtime.cron import CronService
from awa.runtime.inflight import InFlight
from awa.runtime.log_throttle import FailureLog
from awa.runtime.maintenance_duties import Duty, MaintenanceDuties
from awa.runtime.queue_gauges import QueueGauges

log = logging.getLogger("awa.runtime.maintenance")

#: After a failed renewal, the next try comes this soon (while the lease still lasts).
_RENEW_RETRY = 0.25
#: How long stopping waits for the maintenance thread once its duty finished.
_THREAD_JOIN = 10.0

#: Opens the maintenance thread's storage engine and control plane (on its event loop).
BackendFactory = Callable[[], Awaitable[Backend]]


class MaintenanceLeader:
    """Tries to take the maintenance lease (again as soon as the holder's would end, at
    most every ``leader_election_interval``); while it holds it, runs each duty on its own
    interval and renews the lease every third of its ttl. A failing duty is logged and
    retried on its next tick; a lease that ran out or changed hands stops the duties until
    leadership is won again.

    ``engine_factory`` moves the loop onto a thread of its own with an engine and control
    plane of its own (opened there); without one it runs on the caller's event loop with
    ``engine`` and ``control`` (no batch-operation duty without a control plane)."""

    def __init__(
        self,
        engine: StorageEngine,
        lock: LeaderLock,
        config: RuntimeConfig,
        inflight: InFlight,
        *,
        cron: CronService | None = None,
        clock: Clock,
        instance_id: str = "",
        control: ControlPlane | None = None,
        engine_factory: BackendFactory | None = None,
    ) -> None:
        self._engine = engine
        self._control = control
        self._engine_factory = engine_factory
        self._cron = cron
        self._clock = clock
        self._instance_id = instance_id
        self._lock = lock
        self._config = config
        self._inflight = inflight
        self.policy = LeasePolicy(ttl=config.leader_lease_ttl)
        self._leading = False
        #: the term of the lease held now (or last held)
        self.term = 0
        self.runs: dict[str, int] = {}
        self._connect_failures = FailureLog(
            log, "connecting for maintenance", clock=clock.monotonic
        )
        self._election_failures = FailureLog(log, "leader election", clock=clock.monotonic)
        self._duty_failures: dict[str, FailureLog] = {}
        #: how often each rotate / prune outcome word was seen (observability, tests)
        self.ring_outcomes: dict[str, int] = {}
        #: the same for the lease ring
        self.lease_ring_outcomes: dict[str, int] = {}
        self._valid_until: float | None = None
        self._next_renewal = 0.0
        self._stopping = False
        self._wake: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_done = threading.Event()
        self._gauges: QueueGauges | None = None
        #: called with True on taking the lease and False on giving it up, on the thread
        #: maintenance runs on (the runtime republishes its snapshot, so the fleet view
        #: names the new leader at once rather than at the next snapshot interval)
        self.on_leadership: Callable[[bool], None] | None = None

    def _set_leading(self, leading: bool) -> None:
        changed = leading != self._leading
        self._leading = leading
        if not leading:
            self._valid_until = None
        if changed and self.on_leadership is not None:
            try:
                self.on_leadership(leading)
            except Exception:
                log.debug("the leadership callback failed", exc_info=True)

    def stop(self) -> None:
        """Finish the duty under way, then stop (and give the lease up): a shutdown does
        not cut a maintenance statement off in the middle. Callable from any thread."""
        self._stopping = True
        wake, loop = self._wake, self._loop
        if wake is None:
            return
        if loop is None or self._thread is None:
            wake.set()
            return
        with contextlib.suppress(RuntimeError):  # the thread's loop already closed
            loop.call_soon_threadsafe(wake.set)

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads now: it took the lease and, on its own clock, the
        lease has not run out (so a loop stuck in a statement stops claiming leadership
        once its lease ends, before it notices). Read from any thread."""
        return self._leading and self.policy.may_act(self._clock.monotonic(), self._valid_until)

    @property
    def alive(self) -> bool:
        """Whether :meth:`run` is running (electing or leading)."""
        if self._thread is not None:
            return self._thread.is_alive() and not self._thread_done.is_set()
        return self._stopped is not None and not self._stopped.is_set()

    @property
    def threaded(self) -> bool:
        """Whether maintenance runs on a thread of its own."""
        return self._engine_factory is not None

    def rearm(self) -> None:
        """Undo :meth:`stop` before the leader is run again."""
        self._stopping = False

    async def wait_stopped(self) -> None:
        """Return once :meth:`run` has ended (at once if it never started)."""
        if self._thread is not None:
            await anyio.to_thread.run_sync(self._thread_done.wait, abandon_on_cancel=True)
        elif self._stopped is not None:
            await self._stopped.wait()

    async def _pause(self, seconds: float) -> None:
        assert self._wake is not None
        with self._clock.move_on_after(seconds):
            await self._wake.wait()

    async def run(self) -> None:
        """Elect and lead until :meth:`stop` or cancellation (on this loop, or on the
        maintenance thread when an engine factory was given)."""
        if self._engine_factory is None:
            await self._run_on(self._engine, self._control)
            return
        self._thread_done.clear()
        self._thread = threading.Thread(
            target=self._thread_main, name="awa-maintenance", daemon=True
        )
        self._thread.start()
        try:
            await anyio.to_thread.run_sync(self._thread_done.wait, abandon_on_cancel=True)
        finally:
            self.stop()
            with anyio.CancelScope(shield=True), self._clock.move_on_after(_THREAD_JOIN):
                await anyio.to_thread.run_sync(self._thread_done.wait, abandon_on_cancel=True)

    def _thread_main(self) -> None:
        try:
            anyio.run(self._thread_body)
        except Exception:
            log.exception("the maintenance thread stopped; another worker will take over")
        finally:
            self._loop = None
            self._thread_done.set()

    async def _thread_body(self) -> None:
        assert self._engine_factory is not None
        self._loop = asyncio.get_running_loop()
        self._wake = anyio.Event()
        if self._stopping:
            self._wake.set()
        backend: Backend | None = None
        while backend is None and not self._stopping:
            try:
                backend = await self._engine_factory()
            except Exception as exc:
                self._connect_failures.failed(
                    exc, f"; trying again every {self._config.leader_election_interval:g} s"
                )
                await self._pause(self._config.leader_election_interval)
        if backend is None:
            return
        self._connect_failures.succeeded()
        try:
            await self._run_on(backend.engine, backend.control)
        finally:
            with anyio.CancelScope(shield=True):
                await backend.engine.close()

    async def _run_on(self, engine: StorageEngine, control: ControlPlane | None) -> None:
        if self._wake is None or self._engine_factory is None:
            self._wake = anyio.Event()
        self._stopped = anyio.Event()
        if self._stopping:
            self._wake.set()
        instruments = metrics.instruments()
        self._gauges = (
            QueueGauges(engine, instruments, clock=self._clock) if instruments is not None else None
        )
        if self._gauges is not None:
            self._gauges.attach()
        duties = MaintenanceDuties(
            engine,
            self._config,
            self._inflight,
            fence=self.fence,
            cron=self._cron,
            cron_store=control.cron if self.threaded and control is not None else None,
            control=control,
            clock=self._clock,
            instance_id=self._instance_id,
            gauges=self._gauges,
            ring_outcomes=self.ring_outcomes,
            lease_ring_outcomes=self.lease_ring_outcomes,
        ).schedule()
        try:
            while not self._stopping:
                asked = self._clock.monotonic()
                lease: Lease | None
                try:
                    lease = await self._lock.try_acquire(self.policy.ttl)
                except Exception as exc:
                    self._election_failures.failed(exc)
                    lease = None
                else:
                    self._election_failures.succeeded()
                if lease is not None and lease.held:
                    self._took(asked, lease)
                    try:
                        await self._lead(duties)
                    finally:
                        self._set_leading(False)
                    continue
                wait = (
                    self._config.leader_election_interval
                    if lease is None
                    else self.policy.retry_in(lease, self._config.leader_election_interval)
                )
                await self._pause(wait)
        finally:
            self._set_leading(False)
            if self._gauges is not None:
                self._gauges.detach()
            with anyio.CancelScope(shield=True):
                try:
                    await self._lock.release()
                except Exception:
                    log.debug("releasing the leader lease failed", exc_info=True)
            self._stopped.set()

    def _took(self, asked: float, lease: Lease) -> None:
        self._valid_until = self.policy.valid_until(asked, lease)
        self._next_renewal = asked + self.policy.renew_every
        self.term = lease.term
        self._set_leading(True)
        log.info(
            "became maintenance leader (term %d, lease %.3g s, renewed every %.3g s)",
            lease.term,
            self.policy.ttl,
            self.policy.renew_every,
        )

    def fence(self) -> None:
        """Raise :class:`LeaseLapsed` unless the lease lasts long enough to act now; every
        duty calls it before each statement that changes something."""
        if not self.policy.may_act(self._clock.monotonic(), self._valid_until):
            raise LeaseLapsed

    async def _keep_lease(self) -> bool:
        """Renew the lease when due; False (after stepping down) once it ran out or
        changed hands, so nothing more is done under it."""
        now = self._clock.monotonic()
        if not self.policy.may_act(now, self._valid_until):
            await self._lapsed("before it was renewed")
            return False
        if now < self._next_renewal:
            return True
        try:
            lease = await self._lock.try_acquire(self.policy.ttl)
        except Exception:
            log.warning(
                "renewing the maintenance lease failed; it lasts %.1f s more",
                max(0.0, (self._valid_until or now) - self._clock.monotonic()),
                exc_info=True,
            )
            self._next_renewal = self._clock.monotonic() + _RENEW_RETRY
            return await self._still_valid("while renewing it failed")
        if not lease.held or lease.term != self.term:
            log.warning(
                "lost maintenance leadership (term %d) to %s (term %d): stepping down",
                self.term,
                lease.holder,
                lease.term,
            )
            await self._step_down()
            return False
        self._valid_until = self.policy.valid_until(now, lease)
        self._next_renewal = now + self.policy.renew_every
        # An answer that arrived after the lease it renewed had ended (the process was
        # stopped while it waited) is no licence to act.
        return await self._still_valid("while it was being renewed")

    async def _still_valid(self, when: str) -> bool:
        if self.policy.may_act(self._clock.monotonic(), self._valid_until):
            return True
        await self._lapsed(when)
        return False

    async def _lapsed(self, when: str) -> None:
        """The lease ran out under this holder: say so, and step down."""
        late = self._clock.monotonic() - (self._valid_until or self._clock.monotonic())
        log.warning(
            "maintenance lease (term %d) ran out %.1f s ago %s (this process was stopped, "
            "starved or cut off from the database): stepping down before acting again",
            self.term,
            late,
            when,
        )
        await self._step_down()

    async def _step_down(self) -> None:
        self._set_leading(False)
        try:
            await self._lock.release()
        except Exception:
            log.debug("releasing a lost leader lease failed", exc_info=True)

    def _duty_log(self, name: str) -> FailureLog:
        found = self._duty_failures.get(name)
        if found is None:
            found = self._duty_failures[name] = FailureLog(
                log, f"maintenance duty {name}", clock=self._clock.monotonic
            )
        return found

    async def _lead(self, duties: list[Duty]) -> None:
        while not self._stopping:
            if not await self._keep_lease():
                return
            for duty in duties:
                if self._stopping:
                    return
                if self._clock.monotonic() < duty.due:
                    continue
                if not await self._keep_lease():
                    return
                duty.due = self._clock.monotonic() + duty.interval
                # A duty may act only while the lease lasts: one still running when it
                # ends (waiting for a lock a stopped session holds, say) is cut off, its
                # statement cancelled on the server and its transaction rolled back.
                budget = max(0.0, (self._valid_until or 0.0) - self._clock.monotonic())
                try:
                    with self._clock.move_on_after(budget) as scope:
                        # A duty that answers True has more to do: it goes again after
                        # the others had their turn instead of a whole interval later.
                        if await duty.run() is True:
                            duty.due = self._clock.monotonic()
                        self.runs[duty.name] = self.runs.get(duty.name, 0) + 1
                    if scope.cancelled_caught:
                        duty.due = self._clock.monotonic() + max(duty.interval, self.policy.ttl)
                        log.warning(
                            "maintenance duty %s did not finish while the lease (term %d) "
                            "lasted (%.1f s) and was cut off; it runs again in %g s. It was "
                            "probably waiting for a lock that a stopped or stuck session "
                            "holds (see pg_stat_activity for 'idle in transaction').",
                            duty.name,
                            self.term,
                            budget,
                            max(duty.interval, self.policy.ttl),
                        )
                except LeaseLapsed:
                    await self._lapsed(f"while maintenance duty {duty.name} ran")
                    return
                except Exception as exc:
                    self._duty_log(duty.name).failed(exc)
                else:
                    self._duty_log(duty.name).succeeded()
            wake_at = min([self._next_renewal, *(d.due for d in duties)])
            await self._pause(max(0.0, wake_at - self._clock.monotonic()))
