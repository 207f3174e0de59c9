"""The schema admin port on Postgres: what the CLI's ``storage``, ``health``, ``migrate``
and ``queue stats`` commands and ``storage_status()`` read, on a migrated database and on
an empty one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import pytest
from click.testing import CliRunner

from awa.adapters.clock import ManualClock
from awa.domain.transition import Gate, TransitionRefused, TransitionState
from awa.entrypoints import bootstrap
from awa.entrypoints.cli import cli
from awa.entrypoints.client import AsyncClient
from awa.ports.admin import RuntimeCounts, SchemaAdmin
from tests.unit.test_runtime_support import REAL_TIME_GUARD

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


def _publish_runtime(url: str, runtime_id: str, queues: list[dict[str, Any]], **flags: Any) -> None:
    values = {
        "healthy": True,
        "shutting_down": False,
        "storage_capability": "queue_storage",
        **flags,
    }
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO awa.runtime_instances (id, hostname, pid, version, queues, "
            "storage_capability, transition_role, leader, healthy, postgres_connected, "
            "poll_loop_alive, heartbeat_alive, maintenance_alive, shutting_down, "
            "snapshot_interval_ms, started_at, last_seen_at) VALUES (%s, 'h', 1, 'v', %s, "
            "%s, 'auto', false, %s, true, true, true, true, %s, 10000, now(), now())",
            (
                runtime_id,
                json.dumps(queues),
                values["storage_capability"],
                values["healthy"],
                values["shutting_down"],
            ),
        )


@asynccontextmanager
async def connected(url: str, **options: Any) -> AsyncIterator[SchemaAdmin]:
    admin = await bootstrap.connect_schema_admin(url, **options)
    try:
        yield admin
    finally:
        await admin.close()


async def test_reads_on_an_empty_database_are_absent_not_errors(database_url: str) -> None:
    admin = await bootstrap.connect_schema_admin(database_url)
    try:
        assert isinstance(admin, SchemaAdmin)
        assert await admin.schema_version() == 0
        assert await admin.transition_state() is None
        assert await admin.has_transition_functions() is False
        assert await admin.storage_status() is None
        assert await admin.transition_backlog() is None
        assert await admin.ring_maintenance() is None
        assert await admin.runtime_counts() is None
    finally:
        await admin.close()
    await admin.close()  # idempotent


async def test_reads_on_a_migrated_database(migrated_database_url: str) -> None:
    url = migrated_database_url
    _publish_runtime(url, "00000000-0000-0000-0000-000000000001", [{"name": "mail#1"}])
    _publish_runtime(
        url,
        "00000000-0000-0000-0000-000000000002",
        [{"name": "reports"}],
        healthy=False,
        storage_capability="canonical",
    )
    _publish_runtime(
        url, "00000000-0000-0000-0000-000000000003", [{"name": "leaving"}], shutting_down=True
    )
    async with connected(url, connect_timeout=5) as admin:
        assert await admin.schema_version() == bootstrap.current_migration_version()
        state = await admin.transition_state()
        assert state is not None and "singleton" not in state
        status = await admin.storage_status()
        assert status is not None
        assert status["state"] == state["state"]
        assert TransitionState(status["state"]) in set(TransitionState)
        backlog = await admin.transition_backlog()
        assert backlog is not None
        assert set(backlog) == {"active_queue_storage_schema", "canonical_live_backlog"}
        assert backlog["canonical_live_backlog"] == 0
        assert await admin.ring_maintenance() == []
        # A runtime announcing its shutdown still counts in the report, but serves nothing.
        assert await admin.runtime_counts() == RuntimeCounts(
            live=3, unhealthy=1, live_queue_storage_capable=2, live_canonical_only=1
        )
        assert await admin.served_queues() == frozenset({"mail", "reports"})


async def test_check_finalize_changes_nothing(migrated_database_url: str) -> None:
    url = migrated_database_url
    async with connected(url) as admin:
        await admin.prepare("queue_storage", {})
        prepared = await admin.transition_state()
        assert prepared is not None and prepared["state"] == "prepared"
        with pytest.raises(TransitionRefused) as refused:
            await admin.check_finalize()
        assert refused.value.gate is Gate.STATE_IS_MIXED_TRANSITION
        assert await admin.transition_state() == prepared
        _publish_runtime(url, "00000000-0000-0000-0000-000000000009", [{"name": "q"}])
        mixed = await admin.enter_mixed_transition()
        assert mixed.state is TransitionState.MIXED_TRANSITION
        would = await admin.check_finalize()
        assert would.state is TransitionState.ACTIVE
        still = await admin.transition_state()
        assert still is not None and still["state"] == "mixed_transition"
        done = await admin.finalize_when_drained(1.0)
        assert done.state is TransitionState.ACTIVE
        with pytest.raises(TransitionRefused):
            await admin.abort()


async def test_client_storage_status_is_the_admin_status_row(migrated_database_url: str) -> None:
    async with AsyncClient(migrated_database_url, max_connections=2) as client:
        report = json.loads(await client.storage_status())
        row = await (await client.schema_admin()).storage_status()
    assert row is not None
    assert report["state"] == row["state"]
    assert report["transition_epoch"] == row["transition_epoch"]
    assert set(report) == set(row)
    # The blockers of each next step, as awa-pg's ``storage_status()`` reports them.
    assert report["can_enter_mixed_transition"] is False
    assert "the prepared engine is not queue_storage" in report["enter_mixed_transition_blockers"]
    assert report["can_finalize"] is False
    assert report["finalize_blockers"] == [
        "finalize needs state mixed_transition, the cluster is canonical"
    ]
    assert report["canonical_live_backlog"] == 0
    assert report["live_runtime_capability_counts"] == {}


def test_cli_refuses_other_ring_sizes_in_the_default_schema(migrated_database_url: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["storage", "prepare-queue-storage-schema", "--schema", "awa", "--queue-slot-count", "4"],
        env={"DATABASE_URL": migrated_database_url},
    )
    assert result.exit_code == 1
    assert "queue_slot_count: the default schema 'awa' keeps 16" in result.output


async def test_finalize_waits_for_the_backlog_on_the_admins_clock(
    migrated_database_url: str,
) -> None:
    # A canonical job keeps finalize refused: the wait polls on the clock it was given
    # (every 0.5 s of it, a round trip each) and gives up after its timeout of that clock,
    # here simulated; the host's 60 s would outlast the guard.
    url = migrated_database_url
    with psycopg.connect(url) as conn:
        conn.execute("SELECT * FROM awa.insert_job_compat('k')")
    clock = ManualClock()
    async with connected(url, clock=clock) as admin:
        await admin.prepare("queue_storage", {})
        _publish_runtime(url, "00000000-0000-0000-0000-000000000010", [{"name": "q"}])
        await admin.enter_mixed_transition()
        before = clock.monotonic()
        with anyio.fail_after(REAL_TIME_GUARD):
            async with clock.autojump():
                with pytest.raises(TransitionRefused) as refused:
                    await admin.finalize_when_drained(60.0)
        assert refused.value.gate is Gate.CANONICAL_BACKLOG_DRAINED
        assert clock.monotonic() - before == pytest.approx(60.0)
        assert (await admin.storage_status() or {})["state"] == "mixed_transition"
