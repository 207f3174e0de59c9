"""The ``engine`` fixture hands every test a state indistinguishable from a fresh engine.

Postgres engines keep one database per engine for the session and start each test from
``reset`` (see ``conftest``), and the fixture skips the set-up steps that database has
already been through in this process. This test leaves behind what tests leave (a running
attempt, a DLQ entry, a scheduled job, a unique claim, queue settings, a moved clock), then
opens the next test's engine the way the fixture does and checks that none of it shows.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters.clock import ManualClock
from awa.ports.storage import DlqFilter, JobFilter
from tests.contract._support import QUEUE, claim_one, enable_dlq, enqueue
from tests.contract.conftest import contract_engine
from tests.support.backends import BackendRecycler
from tests.support.engines import EngineHandle
from tests.support.pg import DatabaseFactory

pytestmark = pytest.mark.anyio


async def test_what_a_test_leaves_behind_never_reaches_the_next(
    engine: EngineHandle, request: pytest.FixtureRequest
) -> None:
    await enable_dlq(engine)
    await engine.engine.pause_queue("canary_paused", paused_by="canary")
    await enqueue(engine, "canary_dead")
    dead = await claim_one(engine)
    await engine.engine.fail(dead.lease, error="fatal")
    await enqueue(engine, "canary_running")
    await claim_one(engine)
    await enqueue(engine, "canary_later", run_at=engine.clock.now() + timedelta(hours=1))
    await enqueue(engine, "canary_unique", unique_key=b"canary")
    engine.clock.advance(timedelta(hours=2))
    assert await engine.engine.get_dlq(dead.job.id) is not None
    assert len(await engine.engine.list_jobs(JobFilter())) == 3

    async with contract_engine(request, request.node.callspec.params["engine"]) as fresh:
        assert fresh.clock.now() == ManualClock().now()
        assert await fresh.engine.list_jobs(JobFilter()) == []
        assert await fresh.engine.list_dlq(DlqFilter()) == []
        assert await fresh.engine.dlq_depth() == 0
        assert await fresh.engine.queue_counts() == []
        assert await fresh.engine.claim(QUEUE, limit=10) == []
        # The unique claim went with its job: the same key is accepted again.
        again = await enqueue(fresh, "canary_unique", unique_key=b"canary")
        assert [job.id for job in await fresh.engine.list_jobs(JobFilter())] == [again.id]


@pytest.fixture
async def recycled_url(contract_databases: dict[str, str], pg_databases: DatabaseFactory) -> str:
    """A database of the contract suite's (its backends are kept between connections),
    empty: these tests look at sessions, not at rows."""
    if "sessions" not in contract_databases:
        contract_databases["sessions"] = pg_databases.create()
    return contract_databases["sessions"]


async def _pid(conn: DictConnection) -> int:
    row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
    assert row is not None
    return int(row["pid"])


@pytest.mark.postgres
async def test_a_reused_backend_keeps_nothing_of_its_last_session(
    recycled_url: str, backend_recycler: BackendRecycler
) -> None:
    first = await connect(recycled_url)
    pid = await _pid(first)
    await first.execute("SET statement_timeout = '7s'")
    await first.execute("SELECT set_config('awa.canary', 'left', false)")
    await first.execute("SELECT pg_advisory_lock(4242)")
    await first.execute("LISTEN canary")
    await first.execute("CREATE TEMP TABLE canary (n int)")
    await first.execute("PREPARE canary AS SELECT 1")
    await first.execute("CREATE TEMP SEQUENCE canary_seq")
    await first.execute("SELECT nextval('canary_seq')")
    await first.execute("SET ROLE pg_monitor")
    reused = backend_recycler.reused
    await first.close()
    assert first.closed
    with pytest.raises(psycopg.OperationalError):
        await first.execute("SELECT 1")

    second = await connect(recycled_url)
    try:
        # The same backend, or this test would prove nothing.
        assert (await _pid(second), backend_recycler.reused) == (pid, reused + 1)
        row = await (
            await second.execute(
                "SELECT current_setting('statement_timeout') AS timeout,"
                " current_setting('awa.canary', true) AS canary, current_user AS role,"
                " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                "  AND pid = pg_backend_pid()) AS locks,"
                " (SELECT count(*) FROM pg_listening_channels()) AS channels,"
                " (SELECT count(*) FROM pg_prepared_statements) AS prepared,"
                " to_regclass('pg_temp.canary') AS temp"
            )
        ).fetchone()
        assert row == {
            "timeout": "0",
            "canary": "",
            "role": "postgres",
            "locks": 0,
            "channels": 0,
            "prepared": 0,
            "temp": None,
        }
    finally:
        await second.close()


@pytest.mark.postgres
async def test_a_kept_backend_that_was_terminated_is_not_handed_out(
    recycled_url: str, backend_recycler: BackendRecycler
) -> None:
    killer = await connect(recycled_url)
    try:
        first = await connect(recycled_url)
        pid = await _pid(first)
        await first.close()
        assert backend_recycler.idle(recycled_url) == 1
        await killer.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        second = await connect(recycled_url)
        try:
            assert await _pid(second) != pid
        finally:
            await second.close()
    finally:
        await killer.close()
