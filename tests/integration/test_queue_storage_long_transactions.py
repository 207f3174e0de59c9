"""Long transactions degrade reclamation gracefully: work goes on, the leader names the
blocking session (a WARNING and ``awa storage status``), and reclamation resumes as soon
as the session lets go (ADR 0006, "Long transactions")."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import psycopg
import pytest
from click.testing import CliRunner

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.entrypoints.cli import cli
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_longtx"
SLOTS = 4


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, queue_slot_count=SLOTS) as opened:
        opened.long_transaction_after = timedelta(0)
        opened.horizon_check_every = 0.0
        yield opened


async def _step(engine: QueueStorageEngine, jobs: int = 1) -> str:
    """One job finished in the current slot, then the leader's prune and rotate; returns
    the prune outcome. Every step's work must go through whatever prune meets."""
    await engine.enqueue_many([JobSpec(kind="k", queue="q") for _ in range(jobs)])
    claims = await engine.claim("q", limit=jobs)
    assert len(claims) == jobs
    assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * jobs
    outcome = await engine.prune_oldest()
    await engine.rotate_queue_ring()
    return outcome


def _outcomes(migrated_database_url: str) -> dict[str, tuple[str, int | None]]:
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute(
            "SELECT concern, outcome, blocker_pid FROM awa.ring_maintenance WHERE schema_name = %s",
            (SCHEMA,),
        ).fetchall()
    return {concern: (outcome, pid) for concern, outcome, pid in rows}


async def test_a_repeatable_read_reader_of_the_ring_is_named_and_reclaim_resumes(
    engine: QueueStorageEngine, migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(SLOTS + 1):
        await _step(engine)
    reader = await psycopg.AsyncConnection.connect(migrated_database_url)
    async with reader:
        await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await reader.execute(f"SELECT count(*) FROM {SCHEMA}.jobs_resolved")
        pid = reader.info.backend_pid
        caplog.set_level(logging.WARNING, logger="awa.adapters.postgres_queue_storage")
        with anyio.fail_after(60):
            outcomes = [await _step(engine) for _ in range(3)]
        # The worker kept going (every step completed its job); reclaim waits, and says why.
        assert outcomes == ["blocked"] * 3
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"locked by pid {pid}" in m and "transaction started" in m for m in warnings)
        assert len([m for m in warnings if f"pid {pid}" in m and "prune" in m]) == 1
        assert _outcomes(migrated_database_url)["queue"] == ("blocked_by_transaction", pid)
        status = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(
                cli,
                ["--database-url", migrated_database_url, "storage", "status", "--json"],
                env={"DATABASE_URL": None},
            )
        )
        assert status.exit_code == 0, status.output
        shown = json.loads(status.stdout)["ring_maintenance"]
        assert {
            "schema_name": SCHEMA,
            "concern": "queue",
            "outcome": "blocked_by_transaction",
            "blocker_pid": pid,
        }.items() <= next(r for r in shown if r["concern"] == "queue").items()
        await reader.execute("COMMIT")
    # The next prune reclaims.
    assert await _step(engine) == "pruned"
    assert _outcomes(migrated_database_url)["queue"] == ("pruned", None)


def _control_bytes(migrated_database_url: str, table: str) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass)", (f"{SCHEMA}.{table}",)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_an_open_xid_is_named_and_the_control_tables_shrink_after_it(
    engine: QueueStorageEngine, migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _step(engine)
    baseline = _control_bytes(migrated_database_url, "queue_counts")
    engine.compact_growth_bytes = 1  # only "twice the size" decides here
    holder = await psycopg.AsyncConnection.connect(migrated_database_url)
    async with holder:
        await holder.execute("BEGIN")
        await holder.execute("SELECT txid_current()")
        pid = holder.info.backend_pid
        caplog.set_level(logging.WARNING, logger="awa.adapters.postgres_queue_storage")
        # Reclaim itself goes on; only dead control-row versions pile up.
        outcomes = [await _step(engine, jobs=20) for _ in range(60)]
        assert "pruned" in outcomes
        grown = _control_bytes(migrated_database_url, "queue_counts")
        assert grown >= 2 * baseline
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"pid {pid}" in m and "xmin horizon" in m for m in warnings)
        assert _outcomes(migrated_database_url)["horizon"] == ("held", pid)
        await holder.execute("COMMIT")
    await _step(engine)
    assert _outcomes(migrated_database_url)["horizon"] == ("released", None)
    assert _control_bytes(migrated_database_url, "queue_counts") < grown
