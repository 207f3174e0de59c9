"""Cron schedules of the in-memory engine (:class:`~awa.ports.cron.CronStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from awa.adapters.inmemory.core import CoreOps
from awa.domain.cron import CronJob, CronSchedule, fire_spec, fire_stamp, trigger_stamp
from awa.domain.job import JobRecord
from awa.domain.validation import validate_spec
from awa.ports.clock import Clock


class CronOps(CoreOps):
    """Schedules keyed by name. A fire checks and advances ``last_enqueued_at`` and
    inserts the job under the engine's write lock, so it is one atomic step."""

    def __init__(self, clock: Clock, *args: Any, **kwargs: Any) -> None:
        super().__init__(clock, *args, **kwargs)
        self._cron: dict[str, CronJob] = {}

    async def upsert_cron_jobs(self, schedules: Sequence[CronSchedule]) -> None:
        async with self._write() as write:
            for schedule in schedules:
                stored = self._cron.get(schedule.name)
                if stored is None:
                    self._cron[schedule.name] = CronJob(
                        schedule=schedule, created_at=write.now, updated_at=write.now
                    )
                elif stored.schedule != schedule:
                    self._cron[schedule.name] = attrs.evolve(
                        stored, schedule=schedule, updated_at=write.now
                    )

    async def list_cron_jobs(self) -> list[CronJob]:
        self._read()
        return [self._cron[name] for name in sorted(self._cron)]

    async def get_cron_job(self, name: str) -> CronJob | None:
        self._read()
        return self._cron.get(name)

    async def delete_cron_job(self, name: str) -> bool:
        async with self._write():
            return self._cron.pop(name, None) is not None

    async def pause_cron_job(self, name: str, *, paused_by: str | None = None) -> bool:
        async with self._write() as write:
            job = self._cron.get(name)
            if job is None:
                return False
            if not job.paused:
                self._cron[name] = attrs.evolve(
                    job, paused_at=write.now, paused_by=paused_by, updated_at=write.now
                )
            return True

    async def resume_cron_job(self, name: str) -> bool:
        async with self._write() as write:
            job = self._cron.get(name)
            if job is None:
                return False
            self._cron[name] = attrs.evolve(
                job, paused_at=None, paused_by=None, updated_at=write.now
            )
            return True

    async def fire_cron_job(
        self, name: str, *, fire_at: datetime, previous: datetime | None
    ) -> JobRecord | None:
        async with self._write() as write:
            job = self._cron.get(name)
            if job is None or job.paused or job.last_enqueued_at != previous:
                return None
            spec = validate_spec(fire_spec(job.schedule, fire_stamp(name, fire_at)))
            (record,) = self._insert_all(self._routed_view(write), [spec], write)
            self._cron[name] = attrs.evolve(job, last_enqueued_at=fire_at, updated_at=write.now)
            return record

    async def trigger_cron_job(self, name: str) -> JobRecord | None:
        async with self._write() as write:
            job = self._cron.get(name)
            if job is None:
                return None
            spec = validate_spec(fire_spec(job.schedule, trigger_stamp(name)))
            (record,) = self._insert_all(self._routed_view(write), [spec], write)
            return record
