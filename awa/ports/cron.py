"""Cron ports: where schedules are stored and fired, and how expressions are read.

:class:`CronStore` is one store per backend, in its control plane
(:mod:`awa.ports.control_plane`); the contract suite in ``tests/contract/test_cron.py`` is
the executable form of these docstrings.
:class:`CronParser` turns an expression and an IANA zone into a
:class:`~awa.domain.cron.CronCalendar`; an adapter implements it over a cron library.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from awa.domain.cron import CronCalendar, CronJob, CronSchedule
from awa.domain.job import JobRecord


class CronParser(Protocol):
    def __call__(self, cron_expr: str, timezone: str) -> CronCalendar:
        """The calendar of ``cron_expr`` (5 fields, or 6 with seconds first) in the IANA
        zone ``timezone``. Raises ``ValidationError`` naming what is wrong."""
        ...


@runtime_checkable
class CronStore(Protocol):
    async def upsert_cron_jobs(self, schedules: Sequence[CronSchedule]) -> None:
        """Insert or update schedules by name (expression, zone, job fields, policy).

        Never deletes a schedule that is not in ``schedules`` (several deployments may
        declare different ones) and never touches ``last_enqueued_at`` or the pause."""
        ...

    async def list_cron_jobs(self) -> list[CronJob]:
        """Every stored schedule, ordered by name."""
        ...

    async def get_cron_job(self, name: str) -> CronJob | None:
        """The stored schedule called ``name``, or ``None``."""
        ...

    async def delete_cron_job(self, name: str) -> bool:
        """Delete a schedule; ``False`` if there was none. Jobs it enqueued stay."""
        ...

    async def pause_cron_job(self, name: str, *, paused_by: str | None = None) -> bool:
        """Stop automatic fires (``paused_at = now``). ``False`` if there is no such
        schedule. Pausing a paused schedule keeps its first pause time and author."""
        ...

    async def resume_cron_job(self, name: str) -> bool:
        """Allow automatic fires again; ``False`` if there is no such schedule."""
        ...

    async def fire_cron_job(
        self, name: str, *, fire_at: datetime, previous: datetime | None
    ) -> JobRecord | None:
        """Fire one slot of a schedule, atomically.

        In one atomic step: if the schedule exists, is not paused and its
        ``last_enqueued_at`` still equals ``previous`` (compare-and-set; ``None`` matches
        a schedule that never fired), set ``last_enqueued_at = fire_at`` and enqueue its
        job (available now) with metadata ``cron_name`` and ``cron_fire_time`` merged over
        the schedule's. Otherwise change nothing and return ``None``: another leader
        fired that slot first, or the schedule was paused or removed. Postgres engines
        enqueue through ``awa.insert_job_compat``, so the job goes wherever the storage
        transition sends producers. Jobs into a paused queue are kept until it resumes.
        """
        ...

    async def trigger_cron_job(self, name: str) -> JobRecord | None:
        """Enqueue a schedule's job now, paused or not, without changing the schedule;
        metadata carries ``cron_name`` and ``triggered_manually``. ``None`` if there is no
        such schedule."""
        ...
