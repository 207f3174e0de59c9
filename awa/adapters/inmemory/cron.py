"""Cron schedules in memory (:class:`~awa.ports.cron.CronStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import attrs

from awa.adapters.inmemory.core import CoreOps
from awa.domain.cron import CronJob, CronSchedule, fire_spec, fire_stamp, trigger_stamp
from awa.domain.job import JobRecord
from awa.domain.validation import validate_spec
from awa.ports.clock import Clock


class InMemoryCronStore:
    """Schedules keyed by name. A fire checks and advances ``last_enqueued_at`` and
    inserts the job in one write of ``home``'s store (:meth:`CoreOps.store_insert`), so
    it is one atomic step and the job goes where the store routes producers."""

    def __init__(self, home: CoreOps, clock: Clock) -> None:
        self._home = home
        self._clock = clock
        self._cron: dict[str, CronJob] = {}

    async def upsert_cron_jobs(self, schedules: Sequence[CronSchedule]) -> None:
        now = self._clock.now()
        for schedule in schedules:
            stored = self._cron.get(schedule.name)
            if stored is None:
                self._cron[schedule.name] = CronJob(
                    schedule=schedule, created_at=now, updated_at=now
                )
            elif stored.schedule != schedule:
                self._cron[schedule.name] = attrs.evolve(stored, schedule=schedule, updated_at=now)

    async def list_cron_jobs(self) -> list[CronJob]:
        return [self._cron[name] for name in sorted(self._cron)]

    async def get_cron_job(self, name: str) -> CronJob | None:
        return self._cron.get(name)

    async def delete_cron_job(self, name: str) -> bool:
        return self._cron.pop(name, None) is not None

    async def pause_cron_job(self, name: str, *, paused_by: str | None = None) -> bool:
        job = self._cron.get(name)
        if job is None:
            return False
        if not job.paused:
            now = self._clock.now()
            self._cron[name] = attrs.evolve(job, paused_at=now, paused_by=paused_by, updated_at=now)
        return True

    async def resume_cron_job(self, name: str) -> bool:
        job = self._cron.get(name)
        if job is None:
            return False
        self._cron[name] = attrs.evolve(
            job, paused_at=None, paused_by=None, updated_at=self._clock.now()
        )
        return True

    async def fire_cron_job(
        self, name: str, *, fire_at: datetime, previous: datetime | None
    ) -> JobRecord | None:
        async with self._home.store_insert() as write:
            job = self._cron.get(name)
            if job is None or job.paused or job.last_enqueued_at != previous:
                return None
            record = write.insert(validate_spec(fire_spec(job.schedule, fire_stamp(name, fire_at))))
            self._cron[name] = attrs.evolve(job, last_enqueued_at=fire_at, updated_at=write.now)
            return record

    async def trigger_cron_job(self, name: str) -> JobRecord | None:
        async with self._home.store_insert() as write:
            job = self._cron.get(name)
            if job is None:
                return None
            return write.insert(validate_spec(fire_spec(job.schedule, trigger_stamp(name))))
