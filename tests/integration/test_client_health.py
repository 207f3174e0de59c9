"""``health_check()`` through start and shutdown, the health listener of ``start()`` and
``awa health`` against a newer schema."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

from awa import AsyncClient, HealthCheck, Job
from awa.entrypoints import bootstrap
from awa.entrypoints.cli import cli
from tests.fixtures.processes import query
from tests.support.waits import until, until_sync

pytestmark = [pytest.mark.postgres]


@dataclasses.dataclass
class Nap:
    seconds: float


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _runtime_rows(url: str) -> list[dict[str, Any]]:
    def alive() -> list[dict[str, Any]]:
        rows = query(url, "SELECT healthy, poll_loop_alive FROM awa.runtime_instances")
        return rows if rows and rows[0]["poll_loop_alive"] else []

    return until_sync(alive, "the runtime's row says its poll loop is alive", timeout=3.0)


def test_health_check_and_listener_through_start_and_shutdown(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with AsyncClient(migrated_database_url) as client:
            napping = asyncio.Event()
            wake = asyncio.Event()

            @client.task(Nap, queue="naps")
            async def nap(job: Job[Nap]) -> None:
                napping.set()
                await asyncio.wait_for(wake.wait(), job.args.seconds)

            await client.start([("naps", 2)], health_addr="127.0.0.1:0")
            address = client.health_address
            assert address is not None
            base = f"http://{address[0]}:{address[1]}"
            health = await client.health_check()
            # Ready at once, not after the first runtime snapshot.
            assert health.healthy and health.poll_loop_alive and not health.shutting_down
            status, report = await asyncio.to_thread(_get, base + "/readyz")
            assert status == 200 and report["ready"] is True, report
            # One flat object, named as the Deployment guide names it.
            assert {k: report[k] for k in ("postgres_connected", "schema_compatible")} == {
                "postgres_connected": True,
                "schema_compatible": True,
            }
            assert (report["poll_loop_alive"], report["heartbeat_alive"]) == (True, True)
            assert (report["maintenance_alive"], report["shutting_down"]) == (True, False)
            assert report["schema_version"] == report["expected_schema_version"]
            assert isinstance(report["leader"], bool) and "checks" not in report
            # The fleet view (`awa health`, the admin UI) sees a healthy runtime at once,
            # not after the first 10 s snapshot interval.
            rows = await asyncio.to_thread(_runtime_rows, migrated_database_url)
            assert [(r["healthy"], r["poll_loop_alive"]) for r in rows] == [(True, True)]

            # A package expecting a newer schema than the database has is not ready.
            newer = bootstrap.current_migration_version() + 1
            monkeypatch.setattr(bootstrap, "current_migration_version", lambda: newer)
            status, report = await asyncio.to_thread(_get, base + "/readyz")
            assert status == 503 and report["failing"] == ["schema_compatible"], report
            monkeypatch.undo()

            await client.insert(Nap(10.0), queue="naps")
            await asyncio.wait_for(napping.wait(), 10)
            stopping = asyncio.create_task(client.shutdown(timeout_ms=3000))

            async def begun() -> HealthCheck | None:
                health = await client.health_check()
                return health if health.shutting_down else None

            draining = await until(begun, "the shutdown task has begun")
            assert draining.shutting_down and not draining.healthy
            status, report = await asyncio.to_thread(_get, base + "/readyz")
            assert status == 503 and report["shutting_down"] is True
            assert "shutting_down" in report["failing"]
            assert (await asyncio.to_thread(_get, base + "/healthz"))[0] == 200
            wake.set()
            await stopping
            assert (await client.health_check()).shutting_down

    asyncio.run(scenario())


def test_awa_health_accepts_a_newer_schema(migrated_database_url: str) -> None:
    newer = bootstrap.current_migration_version() + 1
    query(
        migrated_database_url,
        "INSERT INTO awa.schema_version (version, description) VALUES (%s, 'newer') RETURNING 1",
        newer,
    )
    result = CliRunner().invoke(
        cli,
        ["--database-url", migrated_database_url, "health", "--json"],
        env={"DATABASE_URL": None},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ready"] is True and report["schema_version"] == newer
