"""Runtime snapshots in ``awa.runtime_instances`` and heartbeats on their own thread."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from awa import AsyncClient, Job, JobState
from awa.adapters._pg.pool import open_pool
from awa.adapters._pg.runtime_registry import PostgresRuntimeRegistry
from awa.adapters.clock import SystemClock
from awa.entrypoints import bootstrap
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot
from awa.ports.storage import Rescued
from awa.runtime import HandlerRegistry, Runtime, parse_start_args
from tests.support.waits import job_in_state, until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Nap:
    seconds: float


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


def _rows(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return list(conn.execute("SELECT * FROM awa.runtime_instances ORDER BY started_at"))


def _snapshot(runtime_id: str, *, leader: bool = False) -> RuntimeSnapshot:
    now = datetime.now(UTC)
    return RuntimeSnapshot(
        id=runtime_id,
        hostname="h1",
        pid=42,
        version="0.6.9",
        started_at=now,
        last_seen_at=now,
        leader=leader,
        healthy=True,
        postgres_connected=True,
        poll_loop_alive=True,
        heartbeat_alive=True,
        shutting_down=False,
        snapshot_interval_ms=10_000,
        queues=(QueueSnapshot("q", 1, 5, None, None, (2.5, 3)),),
    )


async def test_registry_upserts_lists_and_removes(migrated_database_url: str) -> None:
    pool = await open_pool(migrated_database_url, max_connections=2)
    try:
        registry = PostgresRuntimeRegistry(
            pool, storage_capability="canonical_drain_only", transition_role="canonical_drain"
        )
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        await registry.upsert_runtime(_snapshot(first))
        await registry.upsert_runtime(_snapshot(second))
        await registry.upsert_runtime(_snapshot(first, leader=True))
        listed = await registry.list_runtimes()
        assert [r.id for r in listed] == [first, second]
        assert listed[0].leader and not listed[1].leader
        assert listed[0].queues == (QueueSnapshot("q", 1, 5, None, None, (2.5, 3)),)
        rows = {str(r["id"]): r for r in _rows(migrated_database_url)}
        assert rows[first]["storage_capability"] == "canonical_drain_only"
        assert rows[first]["transition_role"] == "canonical_drain"
        assert rows[first]["queues"][0]["rate_limit"] == {"max_rate": 2.5, "burst": 3}

        # A runtime silent for longer than the window is not live, and GC forgets it
        # once it is past the horizon.
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE awa.runtime_instances SET last_seen_at = now() - interval '1 hour'"
                " WHERE id = %s",
                (second,),
            )
        live = await registry.list_runtimes(live_within=timedelta(seconds=30))
        assert [r.id for r in live] == [first]
        await registry.upsert_runtime(_snapshot(first))
        assert [r.id for r in await registry.list_runtimes()] == [first]

        assert await registry.remove_runtime(first) is True
        assert await registry.remove_runtime(first) is False
        with pytest.raises(ValueError, match="transition_role"):
            PostgresRuntimeRegistry(pool, transition_role="sideways")
    finally:
        await pool.close()


async def test_started_client_publishes_its_row_and_removes_it_on_shutdown(
    client: AsyncClient, migrated_database_url: str
) -> None:
    @client.task(Nap, queue="naps")
    async def nap(job: Job[Nap]) -> None:
        return None  # never runs: the test inserts nothing, it reads the runtime's row

    await client.start(
        [
            {
                "name": "naps",
                "max_workers": 3,
                "rate_limit": (10.0, 2),
                "max_running_per_key": 2,
                "global_rate_limit_per_key": (7.0, 4),
            }
        ],
        storage_transition_role="canonical_drain",
    )
    try:
        rows = await until(
            lambda: _rows(migrated_database_url), "the runtime's row is published", timeout=5
        )
        (row,) = rows
        uuid.UUID(str(row["id"]))
        assert row["hostname"] == socket.gethostname()
        assert row["pid"] == os.getpid()
        assert row["version"] == awa.__version__
        assert row["transition_role"] == "canonical_drain"
        assert row["storage_capability"] == "canonical_drain_only"
        (queue,) = row["queues"]
        # in_flight counts the queue's permits held: none by an attempt (nothing was
        # inserted), but the poll's claim holds its batch (the rate limit's burst of 2)
        # while it is under way, so a snapshot taken then shows up to 2.
        assert 0 <= queue["in_flight"] <= 2, queue["in_flight"]
        assert row["queues"] == [
            {
                "name": "naps",
                "in_flight": queue["in_flight"],
                "max_workers": 3,
                "min_workers": None,
                "weight": 1,
                "rate_limit": {"max_rate": 10.0, "burst": 2},
                # the rest of the queue's configuration, as the admin API shows it
                "mode": "hard_reserved",
                "global_max_workers": None,
                "poll_interval_ms": 200,
                "deadline_ms": 300000,
                "aging_interval_ms": 60000,
                "claimers": 1,
                "claim_batch_size": 512,
                "overflow_held": None,
                # the fleet-wide limits its config sets, shown as the limits in force
                "max_running_per_key": 2,
                "global_rate_per_second": None,
                "global_rate_burst": None,
                "global_rate_per_key_per_second": 7.0,
                "global_rate_per_key_burst": 4,
            }
        ]
        assert row["last_seen_at"] is not None and not row["shutting_down"]
    finally:
        await client.shutdown()
    assert _rows(migrated_database_url) == []


async def test_snapshots_refresh_and_report_the_leader(migrated_database_url: str) -> None:
    handlers = HandlerRegistry()

    async def nap(job: Any) -> None:
        return None

    handlers.register("nap", nap, queue="default")
    config = parse_start_args(
        [("default", 1)], handler_queues={"default"}, snapshot_interval_ms=100
    )
    wiring = await bootstrap.open_wiring(migrated_database_url, max_connections=4)
    clock = SystemClock()
    ports = await bootstrap.open_runtime_ports(wiring, clock=clock)
    runtime = Runtime(
        wiring.engine,
        ports.notifier,
        ports.leader_lock,
        clock,
        handlers,
        config,
        runtime_registry=ports.registry,
    )
    await runtime.start()
    try:
        seen: list[datetime] = []

        def refreshed() -> list[dict[str, Any]] | None:
            rows = _rows(migrated_database_url)
            if rows and rows[0]["leader"]:
                seen.append(rows[0]["last_seen_at"])
            return rows if len(set(seen)) >= 2 else None

        rows = await until(refreshed, "the leader's row refreshed", timeout=5)
        assert str(rows[0]["id"]) == runtime.id
    finally:
        await runtime.shutdown()
        await ports.close()
        await wiring.close()
    assert _rows(migrated_database_url) == []


class _Rescuer(threading.Thread):
    """Runs heartbeat rescue from its own event loop, on the same kind of engine the client
    uses, while the test's loop is blocked; records the job's heartbeats from the moment
    the handler blocks (it says so with :meth:`blocked`), and lets the handler go once a
    rescue round has run more than twice the staleness window into the block with the
    heartbeat seen moving five times."""

    def __init__(self, url: str, staleness: timedelta, release: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.staleness = staleness
        self.release = release
        self.stop = threading.Event()
        self.rescued: list[Rescued] = []
        self.heartbeats: set[datetime] = set()
        self.blocked_since: float | None = None
        self.job_id: int | None = None
        self._blocking = threading.Event()

    def blocked(self, job_id: int) -> None:
        """Called by the handler just before it blocks its loop."""
        self.job_id = job_id
        self._blocking.set()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        wiring = await bootstrap.open_wiring(self.url, max_connections=2)
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                blocking = self._blocking.is_set()
                self.rescued += await wiring.engine.rescue_stale_heartbeats(
                    staleness=self.staleness
                )
                if blocking and self.job_id is not None:
                    record = await wiring.engine.get_job(self.job_id)
                    if record is not None and record.heartbeat_at is not None:
                        self.heartbeats.add(record.heartbeat_at)
                    if self.blocked_since is None:
                        self.blocked_since = began
                    elif (
                        began - self.blocked_since > 2 * self.staleness.total_seconds()
                        and len(self.heartbeats) >= 5
                    ):
                        self.release.set()
                # Paces the rounds; each round looks at the database, not at the time.
                await asyncio.sleep(0.1)
        finally:
            await wiring.close()


async def test_heartbeats_continue_while_a_handler_blocks_the_event_loop(
    client: AsyncClient, migrated_database_url: str
) -> None:
    release = threading.Event()
    # Running before the insert: the worker may claim the job and block this loop before
    # the insert's await returns here.
    rescuer = _Rescuer(migrated_database_url, timedelta(seconds=1), release)

    @client.task(Nap)
    async def nap(job: Job[Nap]) -> None:
        rescuer.blocked(job.id)
        # Deliberately blocks the whole event loop, until the rescuer has seen the
        # heartbeat move and rescue pass over it for longer than the staleness window
        # (``seconds`` only bounds a test that fails).
        release.wait(job.args.seconds)

    await client.start([("default", 1)], heartbeat_interval_ms=200, heartbeat_staleness_ms=1000)
    rescuer.start()
    try:
        job = await client.insert(Nap(20.0))
        done = await job_in_state(client, job.id, JobState.Completed, JobState.Retryable)
    finally:
        rescuer.stop.set()
        await asyncio.to_thread(rescuer.join, 10)
        await client.shutdown()
    assert rescuer.job_id == job.id
    assert release.is_set(), (
        f"the heartbeat moved {len(rescuer.heartbeats)} times while the loop was blocked"
    )
    assert rescuer.rescued == []
    assert done.state == JobState.Completed and done.attempt == 1
