"""Periodic jobs at run time: declaring schedules and firing them.

Every runtime declares its own schedules (:meth:`CronService.sync`, at start and every
``sync_interval``); declarations only insert or update, so deployments declaring
different schedules never remove each other's. The maintenance leader evaluates every
stored schedule each ``eval_interval`` (:meth:`CronService.evaluate`): the domain decides
which fire times are due and the store fires each one atomically, so a leader that lost
its lock mid-pass, or two leaders in a failover, enqueue each slot once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from awa.domain.cron import CATCH_UP_LIMIT, CronCalendar, CronJob, CronSchedule, due_fires
from awa.domain.errors import ValidationError
from awa.domain.leadership import LeaseLapsed
from awa.ports.clock import Clock
from awa.ports.cron import CronParser, CronStore
from awa.runtime.log_throttle import FailureLog

log = logging.getLogger("awa.runtime.cron")

#: How often a runtime declares its schedules again.
DEFAULT_SYNC_INTERVAL = 60.0
#: How often the leader evaluates the stored schedules.
DEFAULT_EVAL_INTERVAL = 1.0


class CronService:
    """Declares ``schedules`` to ``store`` and fires due schedules (leader only)."""

    def __init__(
        self,
        store: CronStore,
        parser: CronParser,
        clock: Clock,
        schedules: Sequence[CronSchedule] = (),
        *,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        eval_interval: float = DEFAULT_EVAL_INTERVAL,
        catch_up_limit: int = CATCH_UP_LIMIT,
    ) -> None:
        self.store = store
        self.parser = parser
        self.clock = clock
        self.schedules = tuple(schedules)
        self.sync_interval = sync_interval
        self.eval_interval = eval_interval
        self.catch_up_limit = catch_up_limit
        self._calendars: dict[tuple[str, str], CronCalendar] = {}
        # Rows whose expression or zone cannot be read, reported once per definition.
        self._reported: set[tuple[str, str, str]] = set()
        #: Jobs enqueued by this service's evaluations (observability, tests).
        self.fired = 0
        self._sync_failures = FailureLog(log, "declaring periodic schedules", clock=clock.monotonic)

    async def sync(self) -> None:
        """Insert or update this runtime's schedules (nothing when it declares none)."""
        if self.schedules:
            await self.store.upsert_cron_jobs(self.schedules)
            log.debug("declared %d periodic schedules", len(self.schedules))

    async def sync_loop(self) -> None:
        """Declare the schedules every ``sync_interval`` until cancelled; a failed round is
        logged and tried again on the next one."""
        while True:
            await self.clock.sleep(self.sync_interval)
            try:
                await self.sync()
            except Exception as exc:
                self._sync_failures.failed(exc, "; trying again on the next round")
            else:
                self._sync_failures.succeeded()

    def _calendar(self, job: CronJob) -> CronCalendar | None:
        key = (job.schedule.cron_expr, job.schedule.timezone)
        calendar = self._calendars.get(key)
        if calendar is not None:
            return calendar
        try:
            calendar = self.parser(*key)
        except ValidationError as exc:
            marker = (job.name, *key)
            if marker not in self._reported:
                self._reported.add(marker)
                log.error(
                    "periodic schedule %r cannot fire: %s; fix or delete its awa.cron_jobs row",
                    job.name,
                    exc,
                )
            return None
        self._calendars[key] = calendar
        return calendar

    async def evaluate(
        self, *, store: CronStore | None = None, before_fire: Callable[[], None] | None = None
    ) -> int:
        """Fire every due slot of every stored schedule; returns how many jobs it enqueued.

        ``store`` replaces the service's own for this pass (the maintenance thread has an
        engine of its own); ``before_fire`` runs before each fire and may raise to stop the
        pass (the leader's lease check). A schedule whose fire fails is logged and skipped;
        the others still fire."""
        store = store or self.store
        enqueued = 0
        now = self.clock.now()
        for job in await store.list_cron_jobs():
            calendar = self._calendar(job)
            if calendar is None:
                continue
            try:
                enqueued += await self._fire_due(store, job, calendar, now, before_fire)
            except LeaseLapsed:
                raise
            except Exception:
                log.warning("firing periodic schedule %r failed", job.name, exc_info=True)
        self.fired += enqueued
        return enqueued

    async def _fire_due(
        self,
        store: CronStore,
        job: CronJob,
        calendar: CronCalendar,
        now: datetime,
        before_fire: Callable[[], None] | None,
    ) -> int:
        previous = job.last_enqueued_at
        fired = 0
        for fire_at in due_fires(calendar, job, now, limit=self.catch_up_limit):
            if before_fire is not None:
                before_fire()
            record = await store.fire_cron_job(job.name, fire_at=fire_at, previous=previous)
            if record is None:
                # Fired by another leader, paused or removed since it was read.
                log.debug("periodic schedule %r slot %s already taken", job.name, fire_at)
                break
            log.info(
                "enqueued periodic job %d for schedule %r (fire time %s, queue %s)",
                record.id,
                job.name,
                fire_at.isoformat(),
                record.queue,
            )
            previous = fire_at
            fired += 1
        return fired
