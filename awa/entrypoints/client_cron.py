"""Periodic (cron) schedules on the client: declaring them and administering stored ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from awa.adapters.cron_calendar import parse_cron
from awa.domain.cron import (
    DEFAULT_TIMEZONE,
    CronJob,
    CronSchedule,
    MissedFirePolicy,
    validate_schedule,
)
from awa.domain.errors import ValidationError
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, JobRecord
from awa.domain.keywords import check_keywords
from awa.domain.validation import validate_max_attempts, validate_priority
from awa.entrypoints.args import kind_for_type, to_json_value
from awa.entrypoints.client_core import ClientCore
from awa.entrypoints.insert_options import PeriodicOptions
from awa.entrypoints.job import Job
from awa.ports.cron import CronStore


def _utc_text(value: datetime | None) -> str | None:
    """A timestamp as awa-pg renders it in schedule rows (``2025-06-15T14:00:00Z``)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def next_fire_at(cron_expr: str, timezone: str, after: datetime | None = None) -> str | None:
    """The next fire time of a schedule after ``after`` (default: now) as RFC 3339 UTC
    text, or ``None`` when the expression or zone of a stored row cannot be read."""
    try:
        calendar = parse_cron(cron_expr, timezone)
    except ValidationError:
        return None
    return _utc_text(calendar.next_after(after or datetime.now(UTC)))


def cron_job_dict(job: CronJob) -> dict[str, Any]:
    """A stored schedule as ``list_cron_jobs`` returns it (the ``awa.cron_jobs`` row)."""
    schedule = job.schedule
    return {
        "name": schedule.name,
        "cron_expr": schedule.cron_expr,
        "timezone": schedule.timezone,
        "kind": schedule.kind,
        "queue": schedule.queue,
        "args": schedule.args,
        "priority": schedule.priority,
        "max_attempts": schedule.max_attempts,
        "tags": list(schedule.tags),
        "metadata": schedule.metadata,
        "missed_fire_policy": schedule.missed_fire_policy.value,
        "last_enqueued_at": _utc_text(job.last_enqueued_at),
        "created_at": _utc_text(job.created_at),
        "updated_at": _utc_text(job.updated_at),
        "paused_at": _utc_text(job.paused_at),
        "paused_by": job.paused_by,
    }


def build_schedule(
    function: str,
    name: str,
    cron_expr: str,
    args_type: type[Any],
    args: Any,
    options: PeriodicOptions,
) -> CronSchedule:
    """A validated schedule. Checks run in awa-pg's order (expression, zone, priority,
    attempts, policy) and raise ``ValidationError``; a non-class ``args_type`` raises
    ``TypeError``, as does a keyword ``function`` does not take. An option left out takes
    the default of :class:`CronSchedule`."""
    check_keywords(function, options, PeriodicOptions)
    if not isinstance(args_type, type):
        raise TypeError(f"args_type must be a class, got {type(args_type).__name__}")
    timezone = options.get("timezone", DEFAULT_TIMEZONE)
    priority = options.get("priority", DEFAULT_PRIORITY)
    max_attempts = options.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    metadata = options.get("metadata")
    parse_cron(cron_expr, timezone)
    validate_priority(priority)
    validate_max_attempts(max_attempts)
    policy = MissedFirePolicy.parse(options.get("missed_fire_policy", MissedFirePolicy.COALESCE))
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationError("metadata", f"must be a dict, got {type(metadata).__name__}")
    return validate_schedule(
        CronSchedule(
            name=name,
            cron_expr=cron_expr,
            kind=kind_for_type(args_type, None),
            args=to_json_value(args),
            timezone=timezone,
            queue=options.get("queue", DEFAULT_QUEUE),
            priority=priority,
            max_attempts=max_attempts,
            tags=tuple(options.get("tags") or ()),
            metadata=to_json_value(metadata or {}),
            missed_fire_policy=policy,
        )
    )


class CronMixin(ClientCore):
    """Administration of stored schedules (``awa.cron_jobs``)."""

    async def _cron_store(self) -> CronStore:
        return (await self._control()).cron

    async def list_cron_jobs(self) -> list[dict[str, Any]]:
        """Every stored schedule as a dict of its ``awa.cron_jobs`` columns, by name."""
        return [cron_job_dict(job) for job in await (await self._cron_store()).list_cron_jobs()]

    async def delete_cron_job(self, name: str) -> bool:
        """Delete a stored schedule; ``False`` if there was none. A runtime that still
        declares it stores it again on its next declaration (within a minute)."""
        return await (await self._cron_store()).delete_cron_job(name)

    async def pause_cron_job(self, name: str, paused_by: str | None = None) -> bool:
        """Stop a schedule's automatic fires; ``False`` if there is no such schedule."""
        return await (await self._cron_store()).pause_cron_job(name, paused_by=paused_by)

    async def resume_cron_job(self, name: str) -> bool:
        """Let a paused schedule fire again (its missed-fire policy decides what it
        catches up); ``False`` if there is no such schedule."""
        return await (await self._cron_store()).resume_cron_job(name)

    async def trigger_cron_job(self, name: str) -> Job[Any]:
        """Enqueue a schedule's job now, even while paused, leaving its schedule as it
        is. Raises ``ValidationError`` if there is no such schedule."""
        record: JobRecord | None = await (await self._cron_store()).trigger_cron_job(name)
        if record is None:
            raise ValidationError("name", f"cron job not found: {name}", value=name)
        return Job(record)
