"""Periodic (cron) schedules: their values and the pure decisions about when they fire.

A schedule is declared in code (``client.periodic(...)``), stored in ``awa.cron_jobs``
and evaluated by the maintenance leader. The decisions here take time as a parameter and
reach the calendar of an expression only through :class:`CronCalendar`, which an adapter
implements over a cron library; nothing here reads a clock or parses an expression.

Firing rules (the same on every engine):

* A schedule that never fired (``last_enqueued_at`` null) looks back to one minute before
  it was created, so a schedule created at ``HH:MM:30`` still fires the ``HH:MM:00`` slot.
* ``coalesce``: of the fire times in ``(last, now]`` only the latest is enqueued.
* ``catch_up``: every fire time in ``(last, now]`` is enqueued, oldest first, at most
  :data:`CATCH_UP_LIMIT` per evaluation (the rest follow on the next ones). A schedule
  that never fired catches up from its creation: the one slot at or before it (within
  the lookback, as ``coalesce``) and every slot since, never the fires of the minute
  before it existed.
* A paused schedule fires nothing; its ``last_enqueued_at`` stays, so the policy decides
  what happens on resume. A manual trigger ignores the pause and leaves the schedule alone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import attrs

from awa.domain.errors import ValidationError
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, JobSpec
from awa.domain.validation import (
    validate_kind,
    validate_max_attempts,
    validate_priority,
    validate_queue,
)

#: How many missed fires one ``catch_up`` evaluation enqueues at most.
CATCH_UP_LIMIT = 1000
#: How far before its creation a schedule that never fired looks for its first slot.
FIRST_FIRE_LOOKBACK = timedelta(minutes=1)
#: Metadata keys stamped on every job a schedule enqueues.
CRON_NAME_KEY = "cron_name"
CRON_FIRE_TIME_KEY = "cron_fire_time"
TRIGGERED_MANUALLY_KEY = "triggered_manually"
DEFAULT_TIMEZONE = "UTC"


class MissedFirePolicy(enum.StrEnum):
    """What an evaluation does with fire times it finds in the past."""

    COALESCE = "coalesce"
    CATCH_UP = "catch_up"

    @classmethod
    def parse(cls, value: Any) -> MissedFirePolicy:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValidationError(
                "missed_fire_policy", f"invalid cron missed fire policy {value!r}", value=value
            ) from None


class CronCalendar(Protocol):
    """The fire times of one cron expression in one time zone.

    Instants in and out are timezone-aware; results are in UTC.
    """

    def next_after(self, instant: datetime) -> datetime:
        """The first fire time strictly after ``instant``."""
        ...

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        """The last fire time at or before ``instant`` (``None`` if there is none)."""
        ...


def _policy(value: Any) -> MissedFirePolicy:
    return MissedFirePolicy.parse(value)


def _tags(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


def _mapping(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen
class CronSchedule:
    """A declared periodic job: when it fires and the job each fire enqueues."""

    name: str
    cron_expr: str
    kind: str
    args: Any = attrs.field(factory=dict)
    timezone: str = DEFAULT_TIMEZONE
    queue: str = DEFAULT_QUEUE
    priority: int = DEFAULT_PRIORITY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tags)
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_mapping)
    missed_fire_policy: MissedFirePolicy = attrs.field(
        default=MissedFirePolicy.COALESCE, converter=_policy
    )


@attrs.frozen
class CronJob:
    """A stored schedule (a row of ``awa.cron_jobs``) with its firing state."""

    schedule: CronSchedule
    created_at: datetime
    updated_at: datetime
    last_enqueued_at: datetime | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None

    @property
    def name(self) -> str:
        return self.schedule.name

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


def validate_schedule(schedule: CronSchedule) -> CronSchedule:
    """Check the fields of a schedule other than its expression and zone (which the
    calendar adapter checks): priority, attempts, queue and kind names, tags."""
    if not isinstance(schedule.name, str):
        raise ValidationError("name", f"must be a string, got {type(schedule.name).__name__}")
    if "\x00" in schedule.name:
        raise ValidationError("name", "must not contain NUL bytes")
    validate_priority(schedule.priority)
    validate_max_attempts(schedule.max_attempts)
    validate_kind(schedule.kind)
    validate_queue(schedule.queue)
    for tag in schedule.tags:
        if not isinstance(tag, str):
            raise ValidationError("tags", f"must be strings, got {type(tag).__name__}")
    return schedule


def due_fires(
    calendar: CronCalendar, job: CronJob, now: datetime, *, limit: int = CATCH_UP_LIMIT
) -> list[datetime]:
    """The fire times an evaluation at ``now`` enqueues for ``job``, oldest first.

    Empty when the schedule is paused or nothing is due. ``coalesce`` gives at most the
    latest due time; ``catch_up`` every due time, at most ``limit``.
    """
    if job.paused:
        return []
    after = job.last_enqueued_at
    if after is None:
        # "(created - lookback, now]": the slot of the minute the schedule appeared in.
        floor = job.created_at - FIRST_FIRE_LOOKBACK
        latest = calendar.latest_at_or_before(now)
        if latest is None or latest <= floor:
            return []
        if job.schedule.missed_fire_policy is MissedFirePolicy.COALESCE:
            return [latest]
        # catch_up: nothing it missed before it existed but its creation slot.
        first = calendar.latest_at_or_before(min(job.created_at, now))
        if first is None or first <= floor:
            return _between(calendar, job.created_at, now, limit)
        return [first, *_between(calendar, first, now, limit - 1)] if limit > 0 else []
    if job.schedule.missed_fire_policy is MissedFirePolicy.COALESCE:
        latest = calendar.latest_at_or_before(now)
        return [latest] if latest is not None and latest > after else []
    return _between(calendar, after, now, limit)


def _between(
    calendar: CronCalendar, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Fire times in ``(after, until]``, oldest first, at most ``limit``."""
    fires: list[datetime] = []
    cursor = after
    while len(fires) < limit:
        cursor = calendar.next_after(cursor)
        if cursor > until:
            break
        fires.append(cursor)
    return fires


def fire_time_text(fire_at: datetime) -> str:
    """A fire time as stamped in ``metadata.cron_fire_time`` (Postgres' text form of a
    UTC ``timestamptz``, e.g. ``2025-06-15 14:00:00+00``)."""
    utc = fire_at.astimezone(UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "+00"


def fire_stamp(name: str, fire_at: datetime) -> dict[str, Any]:
    """Metadata merged over the schedule's own into the job of a scheduled fire."""
    return {CRON_NAME_KEY: name, CRON_FIRE_TIME_KEY: fire_time_text(fire_at)}


def trigger_stamp(name: str) -> dict[str, Any]:
    """Metadata merged over the schedule's own into the job of a manual trigger."""
    return {CRON_NAME_KEY: name, TRIGGERED_MANUALLY_KEY: True}


def fire_spec(schedule: CronSchedule, stamp: Mapping[str, Any]) -> JobSpec:
    """The job one fire of ``schedule`` enqueues (available at once)."""
    return JobSpec(
        kind=schedule.kind,
        args=schedule.args,
        queue=schedule.queue,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
        metadata={**schedule.metadata, **stamp},
        tags=schedule.tags,
    )
