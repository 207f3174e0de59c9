"""When schedules fire: the pure decision (``awa.domain.cron``) and the croniter calendar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from awa.adapters.cron_calendar import parse_cron
from awa.domain.cron import (
    CronJob,
    CronSchedule,
    MissedFirePolicy,
    due_fires,
    fire_spec,
    fire_stamp,
    fire_time_text,
    trigger_stamp,
)
from awa.domain.errors import ValidationError


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


CREATED = datetime(2025, 6, 15, 10, 0, 30, tzinfo=UTC)


def job(
    expr: str = "0 * * * *",
    *,
    created: datetime = CREATED,
    last: datetime | None = None,
    policy: str = "coalesce",
    paused: bool = False,
) -> CronJob:
    schedule = CronSchedule(name="s", cron_expr=expr, kind="k", missed_fire_policy=policy)
    return CronJob(
        schedule=schedule,
        created_at=created,
        updated_at=created,
        last_enqueued_at=last,
        paused_at=created if paused else None,
    )


def fires(cron_job: CronJob, now: datetime, tz: str = "UTC", limit: int = 1000) -> list[str]:
    calendar = parse_cron(cron_job.schedule.cron_expr, tz)
    return [f.strftime("%m-%d %H:%M:%S") for f in due_fires(calendar, cron_job, now, limit=limit)]


# ------------------------------------------------------------------ the decision
def test_coalesce_enqueues_only_the_latest_missed_fire() -> None:
    cron_job = job("* * * * *", last=at(2025, 6, 15, 14, 0))
    assert fires(cron_job, at(2025, 6, 15, 15, 0, 20)) == ["06-15 15:00:00"]


def test_catch_up_enqueues_every_missed_fire_oldest_first_and_bounded() -> None:
    cron_job = job("0 * * * *", last=at(2025, 6, 15, 10, 0), policy="catch_up")
    assert fires(cron_job, at(2025, 6, 15, 13, 30)) == [
        "06-15 11:00:00",
        "06-15 12:00:00",
        "06-15 13:00:00",
    ]
    every_second = job("* * * * * *", last=at(2025, 6, 15, 10, 0), policy="catch_up")
    bounded = fires(every_second, at(2025, 6, 15, 11, 0), limit=1000)
    assert len(bounded) == 1000 and bounded[0] == "06-15 10:00:01"


def test_nothing_is_due_until_the_next_slot() -> None:
    cron_job = job("0 * * * *", last=at(2025, 6, 15, 14, 0))
    assert fires(cron_job, at(2025, 6, 15, 14, 59, 59)) == []
    assert fires(cron_job, at(2025, 6, 15, 15, 0)) == ["06-15 15:00:00"]


def test_a_new_schedule_fires_the_slot_of_its_creation_minute_but_nothing_older() -> None:
    every_minute = job("* * * * *", created=at(2025, 6, 15, 10, 21, 32))
    assert fires(every_minute, at(2025, 6, 15, 10, 21, 33)) == ["06-15 10:21:00"]
    hourly = job("0 * * * *", created=at(2025, 6, 15, 10, 21, 32))
    assert fires(hourly, at(2025, 6, 15, 10, 21, 33)) == []
    catch_up = job("*/20 * * * * *", created=at(2025, 6, 15, 10, 21, 32), policy="catch_up")
    # catch_up back-fills nothing from before it existed but its creation slot.
    assert fires(catch_up, at(2025, 6, 15, 10, 21, 41)) == [
        "06-15 10:21:20",
        "06-15 10:21:40",
    ]
    every_second = job("* * * * * *", created=at(2025, 6, 15, 10, 21, 32, 500), policy="catch_up")
    assert len(fires(every_second, at(2025, 6, 15, 10, 21, 44))) == 13  # 10:21:32 .. :44
    minute = job("* * * * *", created=at(2025, 6, 15, 10, 21, 32), policy="catch_up")
    assert fires(minute, at(2025, 6, 15, 10, 21, 33)) == ["06-15 10:21:00"]
    assert fires(minute, at(2025, 6, 15, 10, 23, 1)) == [
        "06-15 10:21:00",
        "06-15 10:22:00",
        "06-15 10:23:00",
    ]


def test_a_paused_schedule_has_nothing_due() -> None:
    cron_job = job("* * * * *", last=at(2025, 6, 15, 14, 0), paused=True)
    assert fires(cron_job, at(2025, 6, 15, 15, 0)) == []


def test_stamps_and_the_fired_job() -> None:
    assert fire_time_text(at(2025, 6, 15, 14, 0)) == "2025-06-15 14:00:00+00"
    assert fire_stamp("s", at(2025, 6, 15, 14, 0)) == {
        "cron_name": "s",
        "cron_fire_time": "2025-06-15 14:00:00+00",
    }
    assert trigger_stamp("s") == {"cron_name": "s", "triggered_manually": True}
    schedule = CronSchedule(
        name="s", cron_expr="* * * * *", kind="k", metadata={"a": 1, "cron_name": "x"}
    )
    spec = fire_spec(schedule, fire_stamp("s", at(2025, 6, 15, 14, 0)))
    assert spec.metadata["cron_name"] == "s" and spec.metadata["a"] == 1
    assert spec.run_at is None and spec.kind == "k"


def test_missed_fire_policy_names() -> None:
    assert MissedFirePolicy.parse("catch_up") is MissedFirePolicy.CATCH_UP
    with pytest.raises(ValidationError, match="invalid cron missed fire policy 'skip'"):
        MissedFirePolicy.parse("skip")


# ------------------------------------------------------------------ the calendar
@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("*/15 * * * * *", at(2025, 6, 15, 14, 35, 7), at(2025, 6, 15, 14, 35, 15)),
        ("30 0 9 * * *", at(2025, 6, 15, 8, 0), at(2025, 6, 15, 9, 0, 30)),
        ("0 9 * * *", at(2025, 6, 15, 8, 0), at(2025, 6, 15, 9, 0)),
        ("@hourly", at(2025, 6, 15, 8, 10), at(2025, 6, 15, 9, 0)),
        ("0 0 L * *", at(2025, 6, 15), at(2025, 6, 30)),
        ("0 0 * * 5#2", at(2025, 6, 1), at(2025, 6, 13)),
        ("0 0 * JAN MON-FRI", at(2025, 6, 1), at(2026, 1, 1)),
        ("0 0 * * 7", at(2025, 6, 10), at(2025, 6, 15)),
        ("0 0 ? * *", at(2025, 6, 10, 1), at(2025, 6, 11)),
        ("  0   0 * * *  ", at(2025, 6, 10, 1), at(2025, 6, 11)),
    ],
)
def test_next_fire_times(expr: str, start: datetime, expected: datetime) -> None:
    assert parse_cron(expr, "UTC").next_after(start) == expected


def test_day_of_month_and_day_of_week_both_restricted_is_either() -> None:
    calendar = parse_cron("0 0 1 * MON", "UTC")
    # 2025-06-01 is a Sunday: the next Monday (the 2nd) comes before July 1st.
    assert calendar.next_after(at(2025, 6, 1, 1)) == at(2025, 6, 2)
    assert calendar.next_after(at(2025, 6, 30, 1)) == at(2025, 7, 1)


def test_time_zones_and_daylight_saving() -> None:
    auckland = parse_cron("0 9 * * *", "Pacific/Auckland")
    assert auckland.next_after(at(2025, 6, 15, 20)) == at(2025, 6, 15, 21)
    # Spring forward: 02:30 does not exist on 2025-03-09 in New York; it fires once at
    # 03:00 EDT (07:00Z), then at 02:30 EDT again.
    gap = parse_cron("30 2 * * *", "America/New_York")
    assert gap.next_after(at(2025, 3, 8, 12)) == at(2025, 3, 9, 7)
    assert gap.next_after(at(2025, 3, 9, 7)) == at(2025, 3, 10, 6, 30)
    # Fall back: 01:30 happens twice on 2025-11-02; a fixed time fires at the first only.
    overlap = parse_cron("30 1 * * *", "America/New_York")
    assert overlap.next_after(at(2025, 11, 1, 12)) == at(2025, 11, 2, 5, 30)
    assert overlap.next_after(at(2025, 11, 2, 5, 30)) == at(2025, 11, 3, 6, 30)
    assert overlap.latest_at_or_before(at(2025, 11, 2, 7)) == at(2025, 11, 2, 5, 30)
    # An every-hour schedule keeps firing through the repeated hour.
    hourly = parse_cron("*/30 * * * *", "America/New_York")
    assert [
        hourly.next_after(at(2025, 11, 2, 5, 0) + timedelta(minutes=30 * i)) for i in range(3)
    ] == [
        at(2025, 11, 2, 5, 30),
        at(2025, 11, 2, 6, 0),
        at(2025, 11, 2, 6, 30),
    ]


def test_latest_at_or_before_includes_the_instant_itself() -> None:
    calendar = parse_cron("*/15 * * * * *", "UTC")
    assert calendar.latest_at_or_before(at(2025, 6, 15, 14, 35, 15)) == at(2025, 6, 15, 14, 35, 15)
    assert calendar.latest_at_or_before(at(2025, 6, 15, 14, 35, 14)) == at(2025, 6, 15, 14, 35)
    minutes = parse_cron("* * * * *", "UTC")
    assert minutes.latest_at_or_before(at(2025, 6, 15, 14, 35, 14)) == at(2025, 6, 15, 14, 35)


@pytest.mark.parametrize(
    ("expr", "tz", "field", "words"),
    [
        ("not a cron", "UTC", "cron_expr", "invalid cron expression: Pattern must consist of"),
        ("0 0 * *", "UTC", "cron_expr", "five or six fields"),
        ("0 0 0 * * * *", "UTC", "cron_expr", "five or six fields"),
        ("61 * * * *", "UTC", "cron_expr", "invalid cron expression"),
        ("* * * * *", "Not/A/Zone", "timezone", "invalid timezone: failed to parse timezone"),
        ("* * * * *", "", "timezone", "invalid timezone"),
        ("61 * * * *", "Not/A/Zone", "cron_expr", "invalid cron expression"),
    ],
)
def test_bad_expressions_and_zones_are_refused(expr: str, tz: str, field: str, words: str) -> None:
    with pytest.raises(ValidationError, match=words) as caught:
        parse_cron(expr, tz)
    assert caught.value.field == field
