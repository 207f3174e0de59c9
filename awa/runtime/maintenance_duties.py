"""What the maintenance leader does, on one engine: each duty with its interval.

:class:`MaintenanceDuties` holds no leadership state; the leader (``maintenance.py``)
runs its schedule while it holds the lease and hands it ``fence``, which every duty calls
between the statements that change something (ADR 0014).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from awa.domain import batches
from awa.domain.admin_views import QUEUE_SAMPLE_INTERVAL, QUEUE_SAMPLES_KEPT, samples_from_depths
from awa.domain.dependencies import EDGE_PRUNE_BATCH, EDGE_RETENTION, VANISHED_GRACE
from awa.domain.lifecycle import Rescue
from awa.domain.policies import PruneOutcome, RingSeal
from awa.domain.rate_limits import PRUNE_BATCH
from awa.domain.states import TERMINAL_STATES
from awa.ports.clock import Clock
from awa.ports.control_plane import ControlPlane
from awa.ports.cron import CronStore
from awa.ports.maintenance import RingMaintenance
from awa.ports.relations import EdgeCursor
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


class Duty:
    """One duty: its name, interval, what runs it, and when it is due next."""

    __slots__ = ("due", "interval", "name", "run")

    def __init__(
        self, name: str, interval: float, run: Callable[[], Awaitable[bool | None]]
    ) -> None:
        self.name = name
        self.interval = interval
        self.run = run
        self.due = 0.0


class MaintenanceDuties:
    """The duties over ``engine``; ``fence`` raises ``LeaseLapsed`` once the lease ran
    out. Ring outcomes are counted into the dictionaries given (observability, tests)."""

    def __init__(
        self,
        engine: StorageEngine,
        config: RuntimeConfig,
        inflight: InFlight,
        *,
        fence: Callable[[], None],
        cron: CronService | None = None,
        cron_store: CronStore | None = None,
        clock: Clock,
        control: ControlPlane | None = None,
        instance_id: str = "",
        gauges: QueueGauges | None = None,
        ring_outcomes: dict[str, int] | None = None,
        lease_ring_outcomes: dict[str, int] | None = None,
    ) -> None:
        self._engine = engine
        self._config = config
        self._inflight = inflight
        self.fence = fence
        self._cron = cron
        self._cron_store = cron_store
        self._control = control
        self._clock = clock
        self._instance_id = instance_id
        self._gauges = gauges
        self.ring_outcomes = {} if ring_outcomes is None else ring_outcomes
        self.lease_ring_outcomes = {} if lease_ring_outcomes is None else lease_ring_outcomes
        #: Where the dependency retention's walk stands between two runs of a long walk.
        self._edge_cursor: EdgeCursor | None = None
        #: Where the search for vanished parents stands between two runs (a parent id).
        self._vanished_cursor = 0
        #: The leader seals the queue ring's slot once it is full or old (ADR 0006).
        self._ring_seal = RingSeal(
            interval=timedelta(seconds=config.queue_storage_queue_rotate_interval)
        )

    def schedule(self) -> list[Duty]:
        """Every duty this engine and configuration call for."""
        engine = self._engine
        c = self._config
        duties = [
            Duty("promote", c.promote_interval, self._promote),
            Duty(
                "rescue_heartbeats",
                c.heartbeat_rescue_interval,
                self._rescue_heartbeats,
            ),
            Duty(
                "rescue_deadlines",
                c.deadline_rescue_interval,
                self._rescue_deadlines,
            ),
            Duty(
                "rescue_callbacks",
                c.callback_rescue_interval,
                self._rescue_callbacks,
            ),
            Duty("cleanup", c.cleanup_interval, self._cleanup),
        ]
        if self._control is not None:
            batch_runner = BatchRunner(
                engine,
                self._control.batch_operations,
                runner_id=self._instance_id,
                clock=self._clock,
            )
            duties.append(Duty("batch_operations", BATCH_OPERATION_INTERVAL, batch_runner.step))
        if self._gauges is not None:
            duties.append(Duty("queue_gauges", REFRESH_INTERVAL, self._gauges.refresh))
        if self._control is not None:
            duties.append(Duty("descriptor_cleanup", c.cleanup_interval, self._descriptors))
            duties.append(Duty("result_cleanup", c.cleanup_interval, self._prune_results))
            duties.append(Duty("dependency_cleanup", c.cleanup_interval, self._prune_edges))
            duties.append(
                Duty("rate_limiter_cleanup", c.cleanup_interval, self._prune_rate_limiters)
            )
        if self._control is not None:
            duties.append(
                Duty(
                    "queue_samples",
                    QUEUE_SAMPLE_INTERVAL.total_seconds(),
                    self._sample_queues,
                )
            )
        if self._cron is not None:
            duties.append(Duty("cron", self._cron.eval_interval, self._cron_evaluate))
        if isinstance(engine, RingMaintenance):
            duties.append(Duty("ring", c.queue_storage_queue_rotate_interval, self._ring))
            duties.append(
                Duty(
                    "lease_ring",
                    c.queue_storage_lease_rotate_interval,
                    self._lease_ring,
                )
            )
        return duties

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
        started = time.perf_counter()
        promoted = await self._engine.promote_due(limit=self._config.promote_batch_size)
        instruments = metrics.instruments()
        if instruments is not None and promoted:
            instruments.promoted(promoted, time.perf_counter() - started)

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
        assert self._control is not None
        await clean_up_descriptors(
            self._control.descriptors, self._clock, self._config.descriptor_retention
        )

    async def _prune_results(self) -> None:
        """Delete the stored results whose retention passed (``awa.domain.results``)."""
        assert self._control is not None
        self.fence()
        await self._control.results.prune_results(before=self._clock.now())

    async def _prune_edges(self) -> bool:
        """Delete the dependency edges of children that finished, whose every edge was
        resolved more than ``EDGE_RETENTION`` ago (ADR 0032); a batch's counts are stored
        on its row first (ADR 0035), and kept one more retention. A child still live (not
        in a terminal state; a job in the DLQ has finished) keeps its edges.

        Only edges resolved before the cutoff are read, oldest first, ``EDGE_PRUNE_BATCH``
        a statement. After ``_CLEANUP_ROUNDS`` full pages the duty answers True and keeps
        its place, so the leader runs it again once the other duties had their turn (and
        renewed its lease in between); a short page ends the walk, and the next run starts
        again from the oldest edge left.

        First, one page of the parents children still wait on is looked for through
        every engine (:meth:`~awa.ports.storage.StorageEngine.answer_vanished_parents`):
        the children of a parent a ``DELETE`` in SQL took, or that two runs
        ``VANISHED_GRACE`` apart found gone, are answered as for a cancel (ADR 0032, "A
        parent that vanishes"); a full page answers True too."""
        assert self._control is not None
        relations = self._control.relations
        now = self._clock.now()
        self.fence()
        step = await self._engine.answer_vanished_parents(
            after=self._vanished_cursor, limit=EDGE_PRUNE_BATCH, seen_before=now - VANISHED_GRACE
        )
        self._vanished_cursor = 0 if step.following is None else step.following
        if step.answered:
            log.info("answered the children of %d vanished parents", step.answered)
        before = now - EDGE_RETENTION
        pruned = 0
        more = False
        for _ in range(_CLEANUP_ROUNDS):
            page = await relations.due_edge_children(
                before=before, after=self._edge_cursor, limit=EDGE_PRUNE_BATCH
            )
            self._edge_cursor = page.cursor if page.full else None
            finished: list[int] = []
            callbacks: list[int] = []
            for child in page.children:
                record = await self._engine.get_job(child)
                if record is not None and record.state not in TERMINAL_STATES:
                    continue
                finished.append(child)
                if record is not None and batches.is_callback(record.metadata):
                    callbacks.append(child)
            if finished:
                self.fence()
                pruned += await relations.prune_edges(
                    finished, before=before, batches_of=callbacks, now=now
                )
            more = page.full
            if not more:
                break
        if not more:
            self.fence()
            await relations.prune_batches(before=before)
        if pruned:
            log.info("pruned %d dependency edges of finished jobs", pruned)
        return more or step.following is not None

    async def _prune_rate_limiters(self) -> None:
        """Delete the fleet-wide rate limiters that refilled their whole burst
        (``awa.domain.rate_limits.idle``), so ``awa.rate_limiters`` keeps the keys in use
        rather than every key ever claimed under a per-key limit."""
        assert self._control is not None
        limiters = self._control.rate_limiters
        pruned = 0
        for _ in range(_CLEANUP_ROUNDS):
            self.fence()
            deleted = await limiters.prune_idle_limiters(now=self._clock.now(), limit=PRUNE_BATCH)
            pruned += deleted
            if deleted < PRUNE_BATCH:
                break
        if pruned:
            log.info("pruned %d idle rate limiters", pruned)

    async def _sample_queues(self) -> None:
        """Record each queue's depth and lag for the admin charts (the same cheap read
        the metrics make), then drop the samples older than the kept window."""
        assert self._control is not None
        samples = self._control.queue_samples
        depths = await self._engine.queue_depths()
        now = self._clock.now()
        self.fence()
        await samples.record_queue_samples(samples_from_depths(depths, now))
        self.fence()
        await samples.prune_queue_samples(before=now - QUEUE_SAMPLES_KEPT)

    async def _cron_evaluate(self) -> None:
        assert self._cron is not None
        # Each fire is its own action: a lease that runs out mid-pass fires no more.
        await self._cron.evaluate(store=self._cron_store, before_fire=self.fence)

    async def _ring(self) -> bool:
        """Reclaim the slot the ring rotates into next (when it is safe), then rotate.

        A prune that ``carried`` moved one bounded step of the slot's backlog and left
        the rest: the duty answers True, so the leader runs it again once the other
        duties had their turn, renewing its lease in between (and stepping down between
        two steps once the lease is gone), instead of one call carrying the whole
        backlog while the lease runs out."""
        assert isinstance(self._engine, RingMaintenance)
        self.fence()
        pruned = await self._engine.prune(
            failed_retention=self._config.failed_retention,
            carry_batch=self._config.queue_storage_carry_batch_size,
        )
        self.ring_outcomes[pruned] = self.ring_outcomes.get(pruned, 0) + 1
        self.fence()
        rotated = await self._engine.rotate(seal=self._ring_seal)
        self.ring_outcomes[rotated] = self.ring_outcomes.get(rotated, 0) + 1
        return pruned == PruneOutcome.CARRIED

    async def _lease_ring(self) -> None:
        """The same for the lease ring: truncate the lease slot the next rotation enters
        once no open attempt's lease is left in it, then rotate."""
        assert isinstance(self._engine, RingMaintenance)
        pruned = await self._engine.prune_leases()
        self.lease_ring_outcomes[pruned] = self.lease_ring_outcomes.get(pruned, 0) + 1
        self.fence()
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
            self.fence()
        for _ in range(_CLEANUP_ROUNDS):
            self.fence()
            deleted = await self._engine.cleanup_dlq(
                retention=c.dlq_retention, batch_size=c.cleanup_batch_size
            )
            if deleted < c.cleanup_batch_size:
                break
