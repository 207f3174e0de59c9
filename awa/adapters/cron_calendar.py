"""Cron calendars over ``croniter`` and ``zoneinfo`` (ADR 0004, "Cron expressions").

The expression language follows the ``croner`` rules awa-pg 0.6.9 uses:

* five fields (minute hour day-of-month month day-of-week) or six with a leading seconds
  field; any other count is refused (croniter alone would also take a year field);
* when both day-of-month and day-of-week are restricted a day matching either fires
  (POSIX/Vixie OR); ``*`` and ``?`` leave a field unrestricted;
* ``L``, ``W``, ``#``, month and weekday names, ``0``/``7`` for Sunday, and the
  ``@yearly`` / ``@monthly`` / ``@weekly`` / ``@daily`` / ``@hourly`` shorthands.

Daylight saving time: a wall time that does not exist (the spring-forward gap) fires
once, at the first instant after the gap; a wall time that happens twice (fall-back)
fires once, at its first occurrence, unless the hour field is ``*``, in which case the
schedule keeps firing through the repeated hour.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from awa.domain.errors import ValidationError

_FIELDS = "Pattern must consist of five or six fields (minute, hour, day, month, day of week, and optional second)."  # noqa: E501
_SHORTHANDS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
#: How many repeated wall times in a row a fall-back hour can hold (60 minutes x 60 s).
_MAX_REPEATS = 3601


def _zone(timezone: str) -> ZoneInfo:
    if not isinstance(timezone, str) or not timezone.strip():
        raise ValidationError("timezone", "invalid timezone: failed to parse timezone")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError(
            "timezone", f"invalid timezone: failed to parse timezone {timezone!r}", value=timezone
        ) from None


def _fields(cron_expr: str) -> tuple[str, bool]:
    """The expression as croniter reads it, and whether its hour field is ``*``."""
    if not isinstance(cron_expr, str):
        raise ValidationError(
            "cron_expr",
            f"invalid cron expression: must be a string, got {type(cron_expr).__name__}",
        )
    text = cron_expr.strip()
    if text.lower() in _SHORTHANDS:
        return text.lower(), text.lower() == "@hourly"
    parts = text.split()
    if len(parts) not in (5, 6):
        raise ValidationError("cron_expr", f"invalid cron expression: {_FIELDS}", value=cron_expr)
    hour = parts[1] if len(parts) == 5 else parts[2]
    return " ".join(parts), hour == "*"


class CroniterCalendar:
    """The fire times of one expression in one zone (see the module docstring)."""

    def __init__(self, cron_expr: str, timezone: str) -> None:
        self._expr, self._hourly = _fields(cron_expr)
        self._seconds = len(self._expr.split()) == 6
        self._zone: tzinfo = UTC
        try:
            # Parses and checks every field once (before the zone, as awa-pg does).
            self._iter(datetime(2000, 1, 1, tzinfo=UTC))
        except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
            raise ValidationError(
                "cron_expr", f"invalid cron expression: {exc}", value=cron_expr
            ) from None
        self._zone = _zone(timezone)

    def _iter(self, start: datetime) -> croniter:
        return croniter(
            self._expr,
            start.astimezone(self._zone),
            second_at_beginning=self._seconds,
            day_or=True,
        )

    def _repeat(self, fire: datetime) -> bool:
        """Whether ``fire`` is the second occurrence of a wall time (fall-back hour) that
        this schedule fires only once."""
        if self._hourly:
            return False
        local = fire.astimezone(self._zone)
        first = local.replace(tzinfo=None).replace(tzinfo=self._zone, fold=0)
        return first.astimezone(UTC) != fire.astimezone(UTC)

    def next_after(self, instant: datetime) -> datetime:
        """The first fire time strictly after ``instant``, in UTC."""
        it = self._iter(instant)
        for _ in range(_MAX_REPEATS):
            fire: datetime = it.get_next(datetime)
            utc = fire.astimezone(UTC)
            if utc > instant and not self._repeat(utc):
                return utc
        raise ValidationError("cron_expr", f"no fire time found after {instant.isoformat()}")

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        """The last fire time at or before ``instant``, in UTC (``None`` if none)."""
        whole = instant.astimezone(UTC).replace(microsecond=0)
        if self._matches(whole):
            return whole
        # get_prev answers strictly before its start, hence the check above.
        it = self._iter(whole)
        for _ in range(_MAX_REPEATS):
            try:
                fire: datetime = it.get_prev(datetime)
            except CroniterBadDateError:
                return None
            utc = fire.astimezone(UTC)
            if not self._repeat(utc):
                return utc
        return None

    def _matches(self, whole: datetime) -> bool:
        if not self._seconds and whole.second:
            return False
        # A whole-second instant is a fire time when the next one after the second
        # before it is the instant itself.
        before = whole.timestamp() - 1
        probe = self._iter(datetime.fromtimestamp(before, UTC))
        fire: datetime = probe.get_next(datetime)
        utc = fire.astimezone(UTC)
        return utc == whole and not self._repeat(utc)


def parse_cron(cron_expr: str, timezone: str) -> CroniterCalendar:
    """The :class:`~awa.ports.cron.CronParser` used by clients and runtimes."""
    return CroniterCalendar(cron_expr, timezone)
