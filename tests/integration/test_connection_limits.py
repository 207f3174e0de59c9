"""A worker on a role or database with a connection limit below what it opens.

It refuses to start, naming the number of connections its configuration needs and the
limit, instead of starting and failing every claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from awa import AsyncClient, Job
from awa.adapters._pg.migrations import migrate
from awa.domain.errors import ConnectionLimitTooLow
from awa.entrypoints.bootstrap import ConnectionBudget
from tests.fixtures.processes import spawn_worker
from tests.support.pg import DatabaseFactory
from tests.support.roles import owned_database

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Ping:
    n: int


@pytest.fixture
def limited_url(pg_databases: DatabaseFactory) -> Iterator[str]:
    with owned_database(pg_databases, connection_limit=3) as url:
        yield url


def _role(url: str) -> str:
    role = psycopg.conninfo.conninfo_to_dict(url).get("user")
    assert isinstance(role, str)
    return role


def test_the_budget_counts_every_connection_a_worker_opens() -> None:
    budget = ConnectionBudget(pool=10)
    # the pool, two kept per hot statement (claim, completion), the heartbeat and the
    # maintenance threads' engines, the LISTEN connection and the leader's lease
    assert budget.total == 10 + 4 + 2 + 2 + 1 + 1
    assert budget.describe().startswith("20 connections (a pool of 10")


async def test_start_refuses_a_role_whose_connection_limit_is_too_low(limited_url: str) -> None:
    await migrate(limited_url)
    async with AsyncClient(limited_url, max_connections=5) as client:

        @client.task(Ping)
        async def ping(job: Job[Ping]) -> None:
            raise AssertionError("no job may run")

        await client.insert(Ping(1))
        with pytest.raises(ConnectionLimitTooLow) as refused:
            await client.start()
        error = refused.value
        assert (error.needed, error.limit) == (5 + 10, 3)
        assert error.scope == f'role "{_role(limited_url)}"'
        message = str(error)
        assert "15 connections (a pool of 5" in message
        assert "allows 3" in message and "CONNECTION LIMIT" in message
        health = await client.health_check()
        assert not health.poll_loop_alive
        (stat,) = await client.queue_stats()
        assert stat.available == 1


async def test_start_refuses_a_database_whose_connection_limit_is_too_low(
    pg_server_url: str, pg_databases: DatabaseFactory
) -> None:
    """The database's limit applies to roles that are not superusers."""
    with owned_database(pg_databases) as owner_url:
        await migrate(owner_url)
        name = str(psycopg.conninfo.conninfo_to_dict(owner_url)["dbname"])
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} CONNECTION LIMIT 4").format(sql.Identifier(name))
            )
        async with AsyncClient(owner_url) as client:

            @client.task(Ping)
            async def ping(job: Job[Ping]) -> None:
                raise AssertionError("no job may run")

            with pytest.raises(ConnectionLimitTooLow, match=r'database "[^"]+" allows 4'):
                await client.start()


def test_awa_worker_exits_naming_the_connections_it_needs(limited_url: str, tmp_path: Path) -> None:
    asyncio.run(migrate(limited_url))
    worker = spawn_worker(limited_url, tmp_path, "--queue", "ticks:2")
    code = worker.process.wait(timeout=60)
    output = worker.output()
    assert code == 1, output
    assert re.search(r"awa: error: this worker opens up to \d+ connections \(a pool", output)
    assert "allows 3" in output
    assert "claim failed" not in output


async def test_start_warns_when_other_sessions_leave_too_few(
    pg_databases: DatabaseFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with owned_database(pg_databases, connection_limit=20) as url:
        await migrate(url)
        held = [psycopg.connect(url, autocommit=True) for _ in range(12)]
        try:
            async with AsyncClient(url, max_connections=2) as client:

                @client.task(Ping)
                async def ping(job: Job[Ping]) -> None:
                    return None

                caplog.set_level(logging.WARNING, logger="awa")
                await client.start([("default", 1)])
                await client.shutdown()
        finally:
            for conn in held:
                conn.close()
    (warning,) = [r.getMessage() for r in caplog.records if "other sessions hold" in r.getMessage()]
    assert "needs up to 12 connections" in warning and "of the 20 that role" in warning
