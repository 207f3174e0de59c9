"""The stale-heartbeat rescue changes a bounded batch of attempts per transaction: one
read finds the batch, one transaction rescues it (each attempt still under its run-lease
guard, each reported on its own)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine, sweeps
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_rescue_batch"
QUEUE = "rescued"


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(
    migrated_database_url: str, clock: ManualClock
) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, clock=clock) as opened:
        # Every closure records the top-level transaction that wrote it (a savepoint's
        # rows carry a subtransaction's xmin, so xmin does not tell).
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {SCHEMA}.closing (slot int, claim_id bigint, tx text);"
                f"CREATE FUNCTION {SCHEMA}.note_closing() RETURNS trigger "
                "LANGUAGE plpgsql AS $f$ BEGIN "
                f"INSERT INTO {SCHEMA}.closing "
                "VALUES (NEW.slot, NEW.claim_id, pg_current_xact_id()::text); RETURN NULL; "
                "END $f$;"
                f"CREATE TRIGGER note_closing AFTER INSERT ON {SCHEMA}.closures "
                f"FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.note_closing()"
            )
        yield opened


def _closing_transactions(url: str, job_ids: list[int]) -> int:
    """How many transactions wrote the closures of these jobs' claims."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(DISTINCT x.tx) FROM {SCHEMA}.closing x "
            f"JOIN {SCHEMA}.claims c ON c.slot = x.slot AND c.claim_id = x.claim_id "
            "WHERE c.job_id = ANY(%s)",
            (job_ids,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _stale(engine: QueueStorageEngine, clock: ManualClock, n: int) -> list[int]:
    await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE) for _ in range(n)])
    claims = await engine.claim(QUEUE, limit=n)
    assert len(claims) == n
    clock.advance(timedelta(minutes=5))
    return sorted(c.job.id for c in claims)


async def test_one_transaction_rescues_the_whole_batch(
    engine: QueueStorageEngine, clock: ManualClock, migrated_database_url: str
) -> None:
    ids = await _stale(engine, clock, 6)
    rescued = await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    # One outcome per attempt, each for its own lease.
    assert sorted(r.lease.job_id for r in rescued) == ids
    assert {r.new_state for r in rescued} == {JobState.Retryable}
    assert _closing_transactions(migrated_database_url, ids) == 1
    # Rescued once: nothing is found again.
    assert await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30)) == []


async def test_batches_are_bounded_and_the_sweep_takes_them_all(
    engine: QueueStorageEngine,
    clock: ManualClock,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sweeps, "RESCUE_BATCH", 2)
    ids = await _stale(engine, clock, 5)
    rescued = await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert sorted(r.lease.job_id for r in rescued) == ids
    # Batches of 2, 2 and 1.
    assert _closing_transactions(migrated_database_url, ids) == 3


async def test_the_rounds_of_one_sweep_are_bounded(
    engine: QueueStorageEngine, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "RESCUE_BATCH", 2)
    monkeypatch.setattr(sweeps, "RESCUE_ROUNDS", 2)
    ids = await _stale(engine, clock, 5)
    first = await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert len(first) == 4
    second = await engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert sorted(r.lease.job_id for r in first + second) == ids
