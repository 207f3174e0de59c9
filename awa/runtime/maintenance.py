"""Cluster maintenance run by the single elected leader."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import anyio

from awa.domain.lifecycle import Rescue
from awa.domain.policies import RingSeal
from awa.ports.clock import Clock
from awa.ports.descriptors import DescriptorStore
from awa.ports.leader import LeaderLock
from awa.ports.maintenance import RingMaintenance
from awa.ports.storage import Rescued, StorageEngine
from awa.runtime import metrics
from awa.runtime.batch_runner import BATCH_OPERATION_INTERVAL, BatchRunner
from awa.runtime.config import RuntimeConfig
from awa.runtime.cron import CronService
from awa.runtime.descriptors import clean_up_descriptors
from awa.runtime.inflight import InFlight
from awa.runtime.queue_gauges import REFRESH_INTERVAL, QueueGauges

log = logging.getLogger("awa.runtime.maintenance")

_CLEANUP_ROUNDS = 10


class _Duty:
    __slots__ = ("due", "interval", "name", "run")

    def __init__(
        self, name: str, interval: float, run: Callable[[], Awaitable[bool | None]]
    ) -> None:
        self.name = name
        self.interval = interval
        self.run = run
        self.due = 0.0


class MaintenanceLeader:
    """Tries to become leader every ``leader_election_interval``; while leader, runs each
    duty on its own interval. A failing duty is logged and retried on its next tick;
    losing the lock stops the duties until leadership is won again."""

    def __init__(
        self,
        engine: StorageEngine,
        lock: LeaderLock,
        config: RuntimeConfig,
        inflight: InFlight,
        *,
        cron: CronService | None = None,
        clock: Clock | None = None,
        instance_id: str = "",
    ) -> None:
        self._engine = engine
        self._cron = cron
        self._clock = clock
        self._batch_runner = BatchRunner(engine, runner_id=instance_id)
        self._lock = lock
        self._config = config
        self._inflight = inflight
        self.is_leader = False
        self.runs: dict[str, int] = {}
        #: how often each rotate / prune outcome word was seen (observability, tests)
        self.ring_outcomes: dict[str, int] = {}
        #: The leader seals the queue ring's slot once it is full or old (ADR 0006).
        self._ring_seal = RingSeal(
            interval=timedelta(seconds=config.queue_storage_queue_rotate_interval)
        )
        #: the same for the lease ring
        self.lease_ring_outcomes: dict[str, int] = {}
        self._stopping = False
        self._wake: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        instruments = metrics.instruments()
        self._gauges = QueueGauges(engine, instruments) if instruments is not None else None

    def stop(self) -> None:
        """Finish the duty under way, then stop (and give the lock up): a shutdown does not
        cut a maintenance statement off in the middle."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    @property
    def alive(self) -> bool:
        """Whether :meth:`run` is running (electing or leading)."""
        return self._stopped is not None and not self._stopped.is_set()

    def rearm(self) -> None:
        """Undo :meth:`stop` before the leader is run again."""
        self._stopping = False

    async def wait_stopped(self) -> None:
        """Return once :meth:`run` has ended (at once if it never started)."""
        if self._stopped is not None:
            await self._stopped.wait()

    async def _pause(self, seconds: float) -> None:
        assert self._wake is not None
        with anyio.move_on_after(seconds):
            await self._wake.wait()

    def _duties(self) -> list[_Duty]:
        c = self._config
        duties = [
            _Duty("promote", c.promote_interval, self._promote),
            _Duty("rescue_heartbeats", c.heartbeat_rescue_interval, self._rescue_heartbeats),
            _Duty("rescue_deadlines", c.deadline_rescue_interval, self._rescue_deadlines),
            _Duty("rescue_callbacks", c.callback_rescue_interval, self._rescue_callbacks),
            _Duty("cleanup", c.cleanup_interval, self._cleanup),
            _Duty("batch_operations", BATCH_OPERATION_INTERVAL, self._batch_runner.step),
        ]
        if self._gauges is not None:
            duties.append(_Duty("queue_gauges", REFRESH_INTERVAL, self._gauges.refresh))
        if self._clock is not None and isinstance(self._engine, DescriptorStore):
            duties.append(_Duty("descriptor_cleanup", c.cleanup_interval, self._descriptors))
        if self._cron is not None:
            duties.append(_Duty("cron", self._cron.eval_interval, self._cron_evaluate))
        if isinstance(self._engine, RingMaintenance):
            duties.append(_Duty("ring", c.queue_storage_queue_rotate_interval, self._ring))
            duties.append(
                _Duty("lease_ring", c.queue_storage_lease_rotate_interval, self._lease_ring)
            )
        return duties

    async def run(self) -> None:
        self._wake = anyio.Event()
        self._stopped = anyio.Event()
        if self._stopping:
            self._wake.set()
        if self._gauges is not None:
            self._gauges.attach()
        try:
            while not self._stopping:
                try:
                    acquired = await self._lock.try_acquire()
                except Exception:
                    log.warning("leader election failed", exc_info=True)
                    acquired = False
                if acquired:
                    self.is_leader = True
                    log.info("became maintenance leader")
                    try:
                        await self._lead()
                    finally:
                        self.is_leader = False
                    continue
                await self._pause(self._config.leader_election_interval)
        finally:
            self.is_leader = False
            if self._gauges is not None:
                self._gauges.detach()
            with anyio.CancelScope(shield=True):
                try:
                    await self._lock.release()
                except Exception:
                    log.debug("releasing the leader lock failed", exc_info=True)
            self._stopped.set()

    async def _lead(self) -> None:
        duties = self._duties()
        check_every = self._config.leader_election_interval
        next_check = time.monotonic() + check_every
        while not self._stopping:
            now = time.monotonic()
            if now >= next_check:
                next_check = now + check_every
                if not await self._still_held():
                    log.warning("lost maintenance leadership")
                    try:
                        await self._lock.release()
                    except Exception:
                        log.debug("releasing a lost leader lock failed", exc_info=True)
                    return
            for duty in duties:
                if self._stopping:
                    return
                if time.monotonic() >= duty.due:
                    duty.due = time.monotonic() + duty.interval
                    try:
                        # A duty that answers True has more to do: it goes again after
                        # the others had their turn instead of a whole interval later.
                        if await duty.run() is True:
                            duty.due = time.monotonic()
                        self.runs[duty.name] = self.runs.get(duty.name, 0) + 1
                    except Exception:
                        log.warning("maintenance duty %s failed", duty.name, exc_info=True)
            wake_at = min([next_check, *(d.due for d in duties)])
            await self._pause(max(0.0, wake_at - time.monotonic()))

    async def _still_held(self) -> bool:
        try:
            return await self._lock.still_held()
        except Exception:
            log.warning("leader lock check failed", exc_info=True)
            return False

    def _flag_local(self, rescued: list[Rescued], sweep: str) -> None:
        instruments = metrics.instruments()
        for item in rescued:
            # A rescued attempt may still be running here; tell its handler to stop.
            self._inflight.cancel(item.lease)
            log.warning(
                "job %s rescued by the %s sweep (%s); it is now %s",
                item.lease.job_id,
                sweep,
                item.reason,
                item.new_state.name.lower(),
                extra={"job_id": item.lease.job_id, "outcome": "rescued", "error": item.reason},
            )
            if instruments is not None:
                instruments.count(
                    "awa.maintenance.rescues",
                    (
                        (metrics.ATTR_REASON, sweep),
                        (metrics.ATTR_STATE, item.new_state.name.lower()),
                    ),
                )
                if item.dlq_reason is not None:
                    instruments.dlq(
                        "awa.job.dlq_moved",
                        1,
                        queue=item.queue,
                        kind=item.kind,
                        reason=item.dlq_reason,
                    )

    async def _promote(self) -> None:
        started = time.monotonic()
        promoted = await self._engine.promote_due(limit=self._config.promote_batch_size)
        instruments = metrics.instruments()
        if instruments is not None and promoted:
            instruments.promoted(promoted, time.monotonic() - started)

    async def _rescue_heartbeats(self) -> None:
        self._flag_local(
            await self._engine.rescue_stale_heartbeats(staleness=self._config.heartbeat_staleness),
            Rescue.HEARTBEAT_STALE.value,
        )

    async def _rescue_deadlines(self) -> None:
        self._flag_local(
            await self._engine.rescue_expired_deadlines(), Rescue.DEADLINE_EXCEEDED.value
        )

    async def _rescue_callbacks(self) -> None:
        self._flag_local(
            await self._engine.rescue_expired_callbacks(), Rescue.CALLBACK_TIMEOUT.value
        )

    async def _descriptors(self) -> None:
        assert self._clock is not None and isinstance(self._engine, DescriptorStore)
        await clean_up_descriptors(self._engine, self._clock, self._config.descriptor_retention)

    async def _cron_evaluate(self) -> None:
        assert self._cron is not None
        await self._cron.evaluate()

    async def _ring(self) -> None:
        """Reclaim the slot the ring rotates into next (when it is safe), then rotate."""
        assert isinstance(self._engine, RingMaintenance)
        pruned = await self._engine.prune(failed_retention=self._config.failed_retention)
        self.ring_outcomes[pruned] = self.ring_outcomes.get(pruned, 0) + 1
        rotated = await self._engine.rotate(seal=self._ring_seal)
        self.ring_outcomes[rotated] = self.ring_outcomes.get(rotated, 0) + 1

    async def _lease_ring(self) -> None:
        """The same for the lease ring: truncate the lease slot the next rotation enters
        once no open attempt's lease is left in it, then rotate."""
        assert isinstance(self._engine, RingMaintenance)
        pruned = await self._engine.prune_leases()
        self.lease_ring_outcomes[pruned] = self.lease_ring_outcomes.get(pruned, 0) + 1
        rotated = await self._engine.rotate_leases()
        self.lease_ring_outcomes[rotated] = self.lease_ring_outcomes.get(rotated, 0) + 1

    async def _cleanup(self) -> None:
        c = self._config
        for _ in range(_CLEANUP_ROUNDS):
            deleted = await self._engine.cleanup_retention(
                completed=c.completed_retention,
                failed=c.failed_retention,
                batch_size=c.cleanup_batch_size,
            )
            if deleted < c.cleanup_batch_size:
                break
        for _ in range(_CLEANUP_ROUNDS):
            deleted = await self._engine.cleanup_dlq(
                retention=c.dlq_retention, batch_size=c.cleanup_batch_size
            )
            if deleted < c.cleanup_batch_size:
                break
