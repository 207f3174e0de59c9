"""Cron schedule storage of a Postgres database (:class:`~awa.ports.cron.CronStore`).

Schedules live in ``awa.cron_jobs``, whatever engine runs the jobs; a fire enqueues
through ``awa.insert_job_compat``, so the job goes where the storage transition sends
producers. One :class:`PgCronStore` serves the whole database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rows import job_from_row
from awa.adapters._pg.sql import load_queries
from awa.domain.cron import CronJob, CronSchedule, fire_stamp, trigger_stamp
from awa.domain.job import JobRecord
from awa.ports.clock import Clock


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "cron.sql")[name].encode()


def cron_job_from_row(row: Mapping[str, Any]) -> CronJob:
    """A :class:`CronJob` from an ``awa.cron_jobs`` row."""
    return CronJob(
        schedule=CronSchedule(
            name=row["name"],
            cron_expr=row["cron_expr"],
            timezone=row["timezone"],
            kind=row["kind"],
            queue=row["queue"],
            args=row["args"],
            priority=row["priority"],
            max_attempts=row["max_attempts"],
            tags=row["tags"] or (),
            metadata=row["metadata"] or {},
            missed_fire_policy=row["missed_fire_policy"],
        ),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_enqueued_at=row["last_enqueued_at"],
        paused_at=row["paused_at"],
        paused_by=row["paused_by"],
    )


class PgCronStore:
    """:class:`~awa.ports.cron.CronStore` on ``awa.cron_jobs`` (one per backend, on its
    pool)."""

    def __init__(self, pool: AsyncConnectionPool[DictConnection], clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    async def _cron_rows(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query(name), params)
            return list(await cur.fetchall()) if cur.description is not None else []

    async def upsert_cron_jobs(self, schedules: Sequence[CronSchedule]) -> None:
        if not schedules:
            return
        now = self._clock.now()
        async with translated_errors(), self._pool.connection() as conn, conn.transaction():
            for schedule in schedules:
                await conn.execute(
                    _query("upsert_cron_job"),
                    {
                        "name": schedule.name,
                        "cron_expr": schedule.cron_expr,
                        "timezone": schedule.timezone,
                        "kind": schedule.kind,
                        "queue": schedule.queue,
                        "args": Jsonb(schedule.args),
                        "priority": schedule.priority,
                        "max_attempts": schedule.max_attempts,
                        "tags": list(schedule.tags),
                        "metadata": Jsonb(schedule.metadata),
                        "missed_fire_policy": schedule.missed_fire_policy.value,
                        "now": now,
                    },
                )

    async def list_cron_jobs(self) -> list[CronJob]:
        return [cron_job_from_row(row) for row in await self._cron_rows("list_cron_jobs", {})]

    async def get_cron_job(self, name: str) -> CronJob | None:
        rows = await self._cron_rows("get_cron_job", {"name": name})
        return cron_job_from_row(rows[0]) if rows else None

    async def delete_cron_job(self, name: str) -> bool:
        return bool(await self._cron_rows("delete_cron_job", {"name": name}))

    async def pause_cron_job(self, name: str, *, paused_by: str | None = None) -> bool:
        params = {"name": name, "paused_by": paused_by, "now": self._clock.now()}
        return bool(await self._cron_rows("pause_cron_job", params))

    async def resume_cron_job(self, name: str) -> bool:
        params = {"name": name, "now": self._clock.now()}
        return bool(await self._cron_rows("resume_cron_job", params))

    async def fire_cron_job(
        self, name: str, *, fire_at: datetime, previous: datetime | None
    ) -> JobRecord | None:
        rows = await self._cron_rows(
            "fire_cron_job",
            {
                "name": name,
                "fire_at": fire_at,
                "previous": previous,
                "stamp": Jsonb(fire_stamp(name, fire_at)),
                "now": self._clock.now(),
            },
        )
        return job_from_row(rows[0]) if rows else None

    async def trigger_cron_job(self, name: str) -> JobRecord | None:
        rows = await self._cron_rows(
            "trigger_cron_job", {"name": name, "stamp": Jsonb(trigger_stamp(name))}
        )
        return job_from_row(rows[0]) if rows else None
