"""The cron service on the in-memory cron store: declaring, evaluating, missed-fire
policies. Fires land in the engine the store inserts through."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.cron_calendar import parse_cron
from awa.adapters.inmemory import InMemoryCronStore, InMemoryEngine
from awa.domain.cron import CronSchedule, MissedFirePolicy
from awa.ports.storage import JobFilter
from awa.runtime.cron import CronService

pytestmark = pytest.mark.anyio

START = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)


def schedule(name: str = "tick", expr: str = "* * * * *", **fields: object) -> CronSchedule:
    return CronSchedule(name=name, cron_expr=expr, kind="tick", queue="cron", **fields)  # type: ignore[arg-type]


async def fired_times(engine: InMemoryEngine) -> list[str]:
    jobs = await engine.list_jobs(JobFilter(queue="cron"), limit=10_000)
    return sorted(
        str(job.metadata["cron_fire_time"]) for job in jobs if "cron_fire_time" in job.metadata
    )


def service(store: InMemoryCronStore, clock: ManualClock, *schedules: CronSchedule) -> CronService:
    return CronService(store, parse_cron, clock, schedules)


async def test_a_declared_schedule_fires_once_per_slot() -> None:
    clock = ManualClock(START)
    engine = InMemoryEngine(clock)
    store = InMemoryCronStore(engine, clock)
    cron = service(store, clock, schedule())
    await cron.sync()
    assert await cron.evaluate() == 1  # the 12:00 slot of the minute it was declared in
    assert await cron.evaluate() == 0
    clock.advance(30)
    assert await cron.evaluate() == 1
    clock.advance(59)
    assert await cron.evaluate() == 0
    assert await fired_times(engine) == ["2030-01-01 12:00:00+00", "2030-01-01 12:01:00+00"]
    assert cron.fired == 2


async def test_missed_fires_coalesce_or_catch_up_after_downtime() -> None:
    clock = ManualClock(START)
    engine = InMemoryEngine(clock)
    store = InMemoryCronStore(engine, clock)
    cron = service(
        store,
        clock,
        schedule("coalesced"),
        schedule("caught_up", missed_fire_policy=MissedFirePolicy.CATCH_UP),
    )
    await cron.sync()
    await cron.evaluate()
    clock.advance(timedelta(minutes=3))  # the leader was away for three slots
    assert await cron.evaluate() == 4
    jobs = await engine.list_jobs(JobFilter(queue="cron"), limit=100)
    by_name: dict[str, list[str]] = {}
    for job in jobs:
        by_name.setdefault(job.metadata["cron_name"], []).append(job.metadata["cron_fire_time"])
    assert sorted(by_name["coalesced"]) == ["2030-01-01 12:00:00+00", "2030-01-01 12:03:00+00"]
    assert sorted(by_name["caught_up"]) == [f"2030-01-01 12:0{m}:00+00" for m in range(4)]


async def test_a_paused_schedule_fires_nothing_and_resumes_by_its_policy() -> None:
    clock = ManualClock(START)
    engine = InMemoryEngine(clock)
    store = InMemoryCronStore(engine, clock)
    cron = service(store, clock, schedule(missed_fire_policy=MissedFirePolicy.CATCH_UP))
    await cron.sync()
    await cron.evaluate()
    assert await store.pause_cron_job("tick", paused_by="ops")
    clock.advance(timedelta(minutes=2))
    assert await cron.evaluate() == 0
    assert await store.resume_cron_job("tick")
    assert await cron.evaluate() == 2


async def test_declaring_again_never_removes_other_schedules() -> None:
    clock = ManualClock(START)
    engine = InMemoryEngine(clock)
    store = InMemoryCronStore(engine, clock)
    await service(store, clock, schedule("a"), schedule("b")).sync()
    await service(store, clock, schedule("a", expr="0 * * * *")).sync()
    stored = {job.name: job.schedule.cron_expr for job in await store.list_cron_jobs()}
    assert stored == {"a": "0 * * * *", "b": "* * * * *"}


async def test_an_unreadable_row_is_reported_once_and_others_still_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(START)
    engine = InMemoryEngine(clock)
    store = InMemoryCronStore(engine, clock)
    # A row written by hand with an expression no runtime can read.
    await store.upsert_cron_jobs([schedule("broken", expr="61 * * * *"), schedule("ok")])
    cron = service(store, clock)
    with caplog.at_level(logging.ERROR, logger="awa.runtime.cron"):
        assert await cron.evaluate() == 1
        clock.advance(60)
        assert await cron.evaluate() == 1
    reports = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len(reports) == 1 and "fix or delete" in reports[0].getMessage()
