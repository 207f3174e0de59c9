"""Instants Python cannot read back: refused at insert, tolerated when already stored.

Postgres stores ``timestamptz`` far outside Python's years 1..9999 (and +-infinity). A job
whose ``run_at`` lies out there is refused by the API (``ValidationError``) and by the SQL
surface (a check error). Rows written before those checks existed are skipped by every
read, logged with their id, and do not stop promotion, claims or listings of other jobs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from awa.domain.errors import ValidationError
from awa.domain.states import JobState
from awa.domain.validation import MAX_RUN_AT, MIN_RUN_AT
from awa.ports.storage import JobFilter
from tests.contract._support import QUEUE, SECOND, claim_ids, counts_for, enqueue, fetch, spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

PLUS_5 = timezone(timedelta(hours=5))
MINUS_5 = timezone(timedelta(hours=-5))
UNREADABLE = [datetime.min.replace(tzinfo=PLUS_5), datetime.max.replace(tzinfo=MINUS_5)]


@pytest.mark.parametrize("run_at", UNREADABLE, ids=["1-BC-in-UTC", "year-10000-in-UTC"])
async def test_a_run_at_python_cannot_read_back_is_refused(
    engine: EngineHandle, run_at: datetime
) -> None:
    with pytest.raises(ValidationError) as info:
        await engine.engine.enqueue_many([spec(run_at=run_at), spec(kind="valid_job")])
    assert info.value.field == "run_at"
    assert "0001-01-01" in str(info.value) and "9999-12-31" in str(info.value)
    assert await engine.engine.list_jobs(JobFilter(), limit=10) == []


async def test_the_extreme_instants_both_sides_can_read_are_kept_exactly(
    engine: EngineHandle,
) -> None:
    early = await enqueue(engine, run_at=MIN_RUN_AT)
    late = await enqueue(engine, run_at=MAX_RUN_AT.astimezone(MINUS_5).replace(tzinfo=MINUS_5))
    assert (await fetch(engine, early.id)).run_at == MIN_RUN_AT
    assert (await fetch(engine, late.id)).run_at == MAX_RUN_AT
    listed = {job.id for job in await engine.engine.list_jobs(JobFilter(), limit=10)}
    assert listed == {early.id, late.id}


def _needs_sql(engine: EngineHandle) -> str:
    if engine.database_url is None:
        pytest.skip("the in-memory engine holds Python datetimes only")
    return engine.database_url


@pytest.mark.parametrize(
    "literal", ["-infinity", "infinity", "0001-12-31 23:00:00+00 BC", "10000-01-01 00:00:00+00"]
)
@pytest.mark.parametrize("state", ["available", "scheduled"])
async def test_sql_producers_get_a_check_error(
    engine: EngineHandle, literal: str, state: str
) -> None:
    url = _needs_sql(engine)
    with psycopg.connect(url, autocommit=True) as conn:
        count = "SELECT count(*) FROM awa.jobs"
        before = conn.execute(count).fetchone()
        with pytest.raises(psycopg.errors.CheckViolation) as info:
            conn.execute(
                "SELECT awa.insert_job_compat('sql_job', %s, p_state => %s::awa.job_state, "
                "p_run_at => %s::timestamptz)",
                (QUEUE, state, literal),
            )
        assert (info.value.diag.constraint_name or "").endswith("run_at_check")
        assert conn.execute(count).fetchone() == before
        # The bounds themselves are accepted.
        conn.execute(
            "SELECT awa.insert_job_compat('sql_job', %s, p_run_at => %s)", (QUEUE, MIN_RUN_AT)
        )


async def test_updating_run_at_out_of_range_through_awa_jobs_is_refused(
    engine: EngineHandle,
) -> None:
    url = _needs_sql(engine)
    job = await enqueue(engine, run_at=engine.clock.now() + 60 * SECOND)
    with (
        psycopg.connect(url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.CheckViolation),
    ):
        conn.execute("UPDATE awa.jobs SET run_at = 'infinity' WHERE id = %s", (job.id,))
    assert (await fetch(engine, job.id)).run_at == job.run_at


def _poison(url: str, engine: EngineHandle, job_id: int) -> None:
    """Set ``run_at = '-infinity'`` on a stored job, as a row written before migration
    0397 could hold it: the check is lifted for this one write and put back."""
    with psycopg.connect(url) as conn:
        if engine.name in ("postgres_canonical", "routing_canonical"):
            conn.execute(
                "ALTER TABLE awa.canonical_jobs DISABLE TRIGGER canonical_jobs_run_at_update"
            )
            conn.execute(
                "UPDATE awa.canonical_jobs SET run_at = '-infinity' WHERE id = %s", (job_id,)
            )
            conn.execute(
                "ALTER TABLE awa.canonical_jobs ENABLE TRIGGER canonical_jobs_run_at_update"
            )
            return
        for table in ("ready_entries", "deferred_jobs"):
            conn.execute(f"ALTER TABLE awa.{table} DROP CONSTRAINT {table}_run_at_check")
            conn.execute(
                f"UPDATE awa.{table} SET run_at = '-infinity' WHERE job_id = %s", (job_id,)
            )
            conn.execute(
                f"ALTER TABLE awa.{table} ADD CONSTRAINT {table}_run_at_check "
                "CHECK (awa.run_at_in_range(run_at)) NOT VALID"
            )


async def test_a_poisoned_row_does_not_stop_promotion_claims_or_reads(
    engine: EngineHandle, caplog: pytest.LogCaptureFixture
) -> None:
    url = _needs_sql(engine)
    later = engine.clock.now() + SECOND
    bad_scheduled = await enqueue(engine, kind="bad_scheduled", run_at=later)
    bad_ready = await enqueue(engine, kind="bad_ready")
    good_scheduled = await enqueue(engine, kind="good_scheduled", run_at=later)
    good_ready = await enqueue(engine, kind="good_ready")
    other_queue = await enqueue(engine, kind="elsewhere", queue="other", run_at=later)
    _poison(url, engine, bad_scheduled.id)
    _poison(url, engine, bad_ready.id)
    engine.clock.advance(2)

    caplog.set_level(logging.DEBUG, logger="awa")
    await engine.engine.promote_due()
    assert (await fetch(engine, good_scheduled.id)).state == JobState.Available
    assert (await fetch(engine, other_queue.id)).state == JobState.Available

    claimed = set(await claim_ids(engine))
    assert {good_scheduled.id, good_ready.id} <= claimed
    assert bad_scheduled.id not in claimed
    assert await claim_ids(engine, "other") == [other_queue.id]

    listed = {job.id for job in await engine.engine.list_jobs(JobFilter(), limit=100)}
    assert listed == {good_scheduled.id, good_ready.id, other_queue.id}
    assert await engine.engine.get_job(bad_ready.id) is None
    counts = await counts_for(engine)
    assert counts.counts[JobState.Running] >= 2

    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    for job in (bad_scheduled, bad_ready):
        assert f"job {job.id}: skipped a row that cannot be read" in warned
    assert "timestamp too small" in warned

    # The operator's repair (the one the log names) makes the job readable again.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (bad_scheduled.id,))
    await engine.engine.promote_due()
    assert await engine.engine.get_job(bad_scheduled.id) is not None
