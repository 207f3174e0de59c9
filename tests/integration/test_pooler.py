"""Awa through a real PgBouncer in transaction mode (ADR 0015).

Every test here reaches Postgres through the session's ``pgbouncer`` fixture
(``pool_mode = transaction``, ``default_pool_size = 4``): the client detects the pooler and
keeps nothing in a session, and workers without a ``listen_database_url`` find at start
that notifications cannot arrive and poll. What runs through the pooler:

- producers: ``insert``, ``insert_many_copy``, transactions, bulk operations;
- workers: claims, completions, retries, callbacks, heartbeats and rescue, the
  maintenance leader, all over one small pool of server connections;
- ``awa migrate`` on an empty database, ``awa health``, ``awa job`` / ``awa queue`` /
  ``awa storage`` commands, and ``awa serve``'s API reads;
- faults: the pooler refusing connections while a worker runs, and restarting (closing
  every client and server connection) while a worker drains: no job is lost, and a job
  runs twice only after its attempt was rescued.

The whole contract suite also runs through the same PgBouncer, on the routing engine
(``routing_queue_storage_pooled`` in ``tests/support/engines.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import awa
from awa import AsyncClient, Job, JobState
from awa.adapters._pg import pool as pg_pool
from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters.clock import SystemClock
from awa.domain.errors import ConnectionLimitTooLow, WakeupsUnavailable
from awa.entrypoints import bootstrap
from awa.entrypoints.cli import cli
from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.support.otel import recording
from tests.support.pg import DatabaseFactory
from tests.support.pgbouncer import PgBouncer
from tests.support.queue_storage import installed_engine
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(60)]


@dataclasses.dataclass
class Ping:
    n: int


@dataclasses.dataclass
class Flaky:
    n: int


@pytest.fixture
def pooled_url(pgbouncer_running: PgBouncer, migrated_database_url: str) -> str:
    return pgbouncer_running.url(migrated_database_url)


@pytest.fixture
async def client(pooled_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(pooled_url, max_connections=8) as c:
        yield c


def _count_states(direct_url: str) -> dict[str, int]:
    with psycopg.connect(direct_url) as conn:
        rows = conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
    return {str(state): int(n) for state, n in rows}


# ---------------------------------------------------------------------- connections
async def test_connections_through_the_pooler_keep_nothing_in_their_session(
    pgbouncer_running: PgBouncer, migrated_database_url: str
) -> None:
    pooled = pgbouncer_running.url(migrated_database_url)
    through = await pg_pool.connect(pooled)
    direct = await pg_pool.connect(migrated_database_url)
    try:
        assert pg_pool.is_pooled(through) and through.prepare_threshold is None
        assert not pg_pool.is_pooled(direct)
        # The direct session got its time zone with the probe (one round trip).
        cur = await direct.execute("SHOW TimeZone")
        shown = await cur.fetchone()
        assert shown is not None and shown["TimeZone"] == "UTC"
        # Timestamps come back in UTC although the pooled session's timezone is the
        # server's default (the setting cannot travel through PgBouncer 1.18).
        cur = await through.execute("SELECT now() AS t")
        row = await cur.fetchone()
        assert row is not None and row["t"].utcoffset().total_seconds() == 0
        assert row["t"].tzinfo is UTC
    finally:
        await through.close()
        await direct.close()
    # Declared direct (a session-mode pooler), no detection: prepared statements allowed.
    pg_pool.declare_pooler(pooled, "direct")
    try:
        declared = await pg_pool.connect(migrated_database_url)
        await declared.close()
        assert not pg_pool.is_pooled(declared)
    finally:
        pg_pool.declare_pooler(pooled, "auto")
    with pytest.raises(ValueError, match="pooler must be one of auto, direct, transaction"):
        AsyncClient(pooled, pooler="session-ish")


async def test_a_url_declared_transaction_keeps_nothing_and_never_listens(
    migrated_database_url: str,
) -> None:
    # Declared, not detected: even a direct server is then used as through a pooler, and
    # the notifier does not even try LISTEN (no server session is left listening).
    async with AsyncClient(migrated_database_url, pooler="transaction") as declared:
        try:
            conn = await pg_pool.connect(migrated_database_url)
            await conn.close()
            assert pg_pool.is_pooled(conn)
            started = time.monotonic()
            with pytest.raises(WakeupsUnavailable, match="declared to go through"):
                await PostgresNotifier(migrated_database_url, clock=SystemClock()).subscribe(
                    ["awa:default"]
                )
            assert time.monotonic() - started < 1.0
            job = await declared.insert(Ping(1))
            assert (await declared.get_job(job.id)).state == JobState.Available
        finally:
            pg_pool.declare_pooler(migrated_database_url, "auto")


async def test_connection_limits_are_the_poolers_to_respect(
    pooled_url: str, migrated_database_url: str
) -> None:
    # A pool larger than the server's max_connections (500 here) is refused directly, and
    # accepted through the pooler: Postgres only sees the pooler's server connections.
    async with AsyncClient(migrated_database_url) as direct:
        with pytest.raises(ConnectionLimitTooLow):
            await bootstrap.check_connection_limits(await direct._wiring(), 1000)
    async with AsyncClient(pooled_url) as pooled:
        budget = await bootstrap.check_connection_limits(await pooled._wiring(), 1000)
        assert budget.total > 1000


async def test_producers_share_four_server_connections_without_collisions(
    client: AsyncClient, migrated_database_url: str
) -> None:
    # Many client connections over 4 server connections, each statement many times: a
    # named prepared statement would be missing on (or collide with) another session.
    async def produce(worker: int) -> None:
        for i in range(15):
            await client.insert(Ping(worker * 100 + i))
        await client.insert_many_copy([Ping(worker * 1000 + i) for i in range(20)])
        async with await client.transaction() as tx:
            await tx.insert(Ping(worker), queue="tx")

    await asyncio.gather(*(produce(w) for w in range(8)))
    counts = _count_states(migrated_database_url)
    assert counts == {"available": 8 * (15 + 20 + 1)}


# ---------------------------------------------------------------------- workers
async def test_worker_drains_through_the_pooler_polling_with_one_warning(
    client: AsyncClient, caplog: pytest.LogCaptureFixture, migrated_database_url: str
) -> None:
    ran: Counter[int] = Counter()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        ran[job.args.n] += 1

    @client.task(Flaky)
    async def flaky(job: Job[Flaky]) -> Any:
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")
        return None

    await client.insert_many_copy([Ping(i) for i in range(120)])
    retried = await client.insert(Flaky(1), max_attempts=3)
    caplog.set_level(logging.WARNING, logger="awa")
    with recording() as recorder:
        await client.start([("default", 8)], poll_interval_ms=100)
        try:
            ready = await client._readiness()
            assert ready["wakeups"] == "polling" and ready["ready"], ready
            await until(lambda: _done(client, retried.id), "the retried job done")
            await until(lambda: len(ran) == 120, "120 jobs ran")
        finally:
            await client.shutdown()
        assert recorder.total("awa.wakeups.polling_fallbacks", {}) == 1
    assert set(ran.values()) == {1}
    warnings = [r for r in caplog.records if "wake-ups: polling only" in r.getMessage()]
    assert len(warnings) == 1 and "listen_database_url" in warnings[0].getMessage()
    assert (await client.get_job(retried.id)).attempt == 2
    assert _count_states(migrated_database_url) == {"completed": 121}


async def test_polling_through_the_pooler_follows_the_work(client: AsyncClient) -> None:
    woken = asyncio.Event()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        woken.set()

    # Polling every 60 s through the pooler, no notifications: after its claims came back
    # empty the loop looks again 5 ms, 10 ms, 20 ms ... later (ADR 0015 amendment), not
    # once a minute, so a job inserted now is picked up within about the time since start.
    await client.start([("default", 2)], poll_interval_ms=60_000)
    try:
        assert (await client._readiness())["wakeups"] == "polling"
        runtime = client._runtime
        assert runtime is not None
        await until(lambda: runtime.dispatchers[0].claim_calls >= 3, "three empty claims")
        await client.insert(Ping(1))
        await asyncio.wait_for(woken.wait(), 30)
    finally:
        await client.shutdown()


async def _done(client: AsyncClient, job_id: int) -> bool:
    return (await client.get_job(job_id)).state == JobState.Completed


async def test_listen_database_url_wakes_workers_through_a_direct_connection(
    client: AsyncClient, migrated_database_url: str
) -> None:
    woken = asyncio.Event()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        woken.set()

    # A long poll interval: only a notification picks the job up within the wait.
    await client.start(
        [("default", 2)], poll_interval_ms=60_000, listen_database_url=migrated_database_url
    )
    try:
        assert (await client._readiness())["wakeups"] == "listen"
        await client.insert(Ping(1))
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await client.shutdown()


async def test_callbacks_and_bulk_operations_through_the_pooler(client: AsyncClient) -> None:
    parked = asyncio.Event()
    callback_ids: list[str] = []

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> Any:
        if job.args.n == 0:
            callback = await job.register_callback(timeout_seconds=60)
            callback_ids.append(callback.id)
            parked.set()
            return awa.WaitForCallback(callback)
        return None

    first = await client.insert(Ping(0))
    await client.start([("default", 2)], poll_interval_ms=100)
    try:
        await asyncio.wait_for(parked.wait(), 15)
        await until(
            lambda: _state_is(client, first.id, JobState.WaitingExternal), "waiting_external"
        )
        await client.complete_external(callback_ids[0], {"ok": True})
        await until(lambda: _done(client, first.id), "the first job done")
    finally:
        await client.shutdown()
    held = [await client.insert(Ping(i), queue="held") for i in range(1, 4)]
    for job in held:
        await client.cancel(job.id)
    for job in held:
        assert (await client.get_job(job.id)).state == JobState.Cancelled


async def _state_is(client: AsyncClient, job_id: int, state: JobState) -> bool:
    return (await client.get_job(job_id)).state == state


async def test_compaction_through_the_pooler_skips_a_busy_table_and_sets_nothing(
    pooled_url: str, migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with installed_engine(pooled_url, "qs_pooled") as engine:
        engine.compact_growth_bytes = 1  # every control table is due
        holder = await psycopg.AsyncConnection.connect(migrated_database_url)
        async with holder:
            await holder.execute("BEGIN")
            await holder.execute("LOCK TABLE qs_pooled.queue_counts IN ROW EXCLUSIVE MODE")
            caplog.set_level(logging.INFO, logger="awa.adapters.postgres_queue_storage")
            busy = await engine.compact_control_tables()
            await holder.execute("COMMIT")
        assert "queue_counts" not in busy and "lanes" in busy
        assert any("queue_counts is busy" in r.getMessage() for r in caplog.records)
        assert "queue_counts" in await engine.compact_control_tables()
    # No lock_timeout was left on any server session the pooler lends out.
    conns = [await psycopg.AsyncConnection.connect(pooled_url) for _ in range(4)]
    try:
        for conn in conns:
            await conn.execute("BEGIN")
        for conn in conns:
            cur = await conn.execute("SHOW lock_timeout")
            assert await cur.fetchone() == ("0",)
    finally:
        for conn in conns:
            await conn.close()


# ---------------------------------------------------------------------- faults
async def test_pooler_restart_mid_drain_loses_no_job(
    pgbouncer_running: PgBouncer,
    client: AsyncClient,
    migrated_database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    total = 300
    ran: Counter[int] = Counter()
    attempts: dict[int, set[int]] = {}
    third = asyncio.Event()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        ran[job.id] += 1
        attempts.setdefault(job.id, set()).add(job.attempt)
        await asyncio.sleep(0.005)  # keeps the drain going long enough for the restart to hit
        if len(ran) >= total // 3:
            third.set()

    await client.insert_many_copy([Ping(i) for i in range(total)])
    caplog.set_level(logging.WARNING, logger="awa")
    await client.start(
        [("default", 8)],
        poll_interval_ms=100,
        heartbeat_interval_ms=300,
        heartbeat_staleness_ms=1500,
        heartbeat_rescue_interval_ms=300,
    )
    try:
        await asyncio.wait_for(third.wait(), 20)
        # SIGINT: PgBouncer closes every client and server connection at once.
        await asyncio.to_thread(pgbouncer_running.restart, signal.SIGINT)
        await until(
            lambda: _count_states(migrated_database_url) == {"completed": total},
            "every job completed",
            timeout=40,
            interval=0.2,
        )
    finally:
        await client.shutdown()
    assert len(ran) == total
    twice = [job_id for job_id, n in ran.items() if n > 1]
    # At least once: a job ran again only as a later attempt (its first one was rescued).
    assert all(len(attempts[job_id]) == ran[job_id] for job_id in twice), attempts
    assert any(r.levelno >= logging.WARNING for r in caplog.records)


async def test_pooler_refusing_connections_is_logged_and_the_worker_recovers(
    pgbouncer_running: PgBouncer,
    client: AsyncClient,
    migrated_database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: Counter[int] = Counter()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        ran[job.args.n] += 1

    caplog.set_level(logging.WARNING, logger="awa")
    await client.start([("default", 4)], poll_interval_ms=100)
    try:
        await asyncio.to_thread(pgbouncer_running.stop)
        # Producers that reach Postgres directly go on while the pooler is down.
        async with AsyncClient(migrated_database_url) as direct:
            await direct.insert_many_copy([Ping(i) for i in range(40)])
        await until(
            lambda: any("refused" in r.getMessage().lower() or r.exc_info for r in caplog.records),
            "a refusal logged",
        )
        await asyncio.to_thread(pgbouncer_running.start)
        await until(lambda: len(ran) == 40, "40 jobs ran", interval=0.1)
    finally:
        await client.shutdown()
    assert set(ran.values()) == {1}


# ---------------------------------------------------------------------- CLI and serve
def _cli(url: str, *args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"DATABASE_URL": url, "AWA_CONTEXT": None})


def test_migrate_an_empty_database_through_the_pooler(
    pgbouncer_running: PgBouncer, pg_databases: DatabaseFactory
) -> None:
    # The whole stream from nothing (about 10 s on a loaded machine, as it is directly).
    empty = pg_databases.create()
    try:
        url = pgbouncer_running.url(empty)
        migrated = _cli(url, "migrate")
        assert migrated.exit_code == 0, migrated.output
        again = _cli(url, "migrate")
        assert again.exit_code == 0, again.output
        health = _cli(url, "health", "--json")
        assert health.exit_code == 0 and json.loads(health.stdout)["ready"], health.output
    finally:
        pg_databases.release(empty)


def test_cli_commands_through_the_pooler(pooled_url: str, migrated_database_url: str) -> None:
    health = _cli(pooled_url, "health", "--json")
    assert health.exit_code == 0, health.output
    report = json.loads(health.stdout)
    assert report["connection"] == "transaction" and report["wakeups"] == "polling"
    assert "listen_database_url" in report["wakeups_reason"]
    listened = _cli(pooled_url, "health", "--json", "--listen-database-url", migrated_database_url)
    assert json.loads(listened.stdout)["wakeups"] == "listen", listened.output
    direct = json.loads(_cli(migrated_database_url, "health", "--json").stdout)
    assert direct["connection"] == "direct" and direct["wakeups"] == "listen"
    declared = CliRunner().invoke(
        cli,
        ["health", "--json"],
        env={"DATABASE_URL": pooled_url, "AWA_CONTEXT": None, "AWA_POOLER": "transaction"},
    )
    assert json.loads(declared.stdout)["wakeups"] == "polling", declared.output
    bad = CliRunner().invoke(
        cli, ["health"], env={"DATABASE_URL": pooled_url, "AWA_POOLER": "sometimes"}
    )
    assert bad.exit_code == 2 and "pooler must be one of" in bad.output
    inserted = _cli(pooled_url, "job", "enqueue", "ping", "--args", '{"n": 1}')
    assert inserted.exit_code == 0, inserted.output
    for command in (("job", "list"), ("queue", "stats"), ("storage", "status")):
        result = _cli(pooled_url, *command)
        assert result.exit_code == 0, (command, result.output)
    assert "ping" in _cli(pooled_url, "job", "list").output


def test_serve_reads_through_the_pooler(pooled_url: str) -> None:
    with awa.Client(pooled_url, pooler="transaction") as producer:
        job = producer.insert({"n": 1}, kind="ping", queue="mail")
    config = ServerConfig(database_url=pooled_url, cache_ttl=0.0)
    with TestClient(create_app(config), base_url="http://127.0.0.1:3000") as web:
        for path in ("/api/jobs", "/api/stats", "/api/queues", "/api/dlq", "/api/cron"):
            response = web.get(path)
            assert response.status_code == 200, (path, response.text)
        assert web.get(f"/api/jobs/{job.id}").json()["job"]["kind"] == "ping"
        assert web.get("/").status_code == 200
