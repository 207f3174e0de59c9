"""``awa queue overrides`` against a real database, and a running worker applying them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from awa import AsyncClient, Job
from awa.entrypoints.cli import cli
from tests.support.waits import until

pytestmark = pytest.mark.postgres


def awa_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def test_set_show_clear(migrated_database_url: str) -> None:
    url = migrated_database_url
    result = awa_cli(
        url, "queue", "overrides", "set", "mail", "--claim-batch-size", "64", "--rate-limit", "2.5"
    )
    assert result.exit_code == 0, result.output
    assert "claim_batch_size=64" in result.stdout
    shown = json.loads(awa_cli(url, "queue", "overrides", "show", "--json").stdout)
    assert shown["mail"]["claim_batch_size"] == 64
    assert shown["mail"]["rate_limit_per_second"] == 2.5
    table = awa_cli(url, "queue", "overrides", "show", "mail").stdout.splitlines()
    assert table[0].split()[0] == "QUEUE" and table[1].split()[:3] == ["mail", "-", "64"]
    # A set replaces the whole override state.
    awa_cli(url, "queue", "overrides", "set", "mail", "--poll-interval-ms", "500")
    shown = json.loads(awa_cli(url, "queue", "overrides", "show", "mail", "--json").stdout)
    assert shown == {
        "mail": {
            "poll_interval_ms": 500,
            "claim_batch_size": None,
            "rate_limit_per_second": None,
            "rate_limit_burst": None,
            "deadline_ms": None,
            "max_running_per_key": None,
            "global_rate_per_second": None,
            "global_rate_burst": None,
            "global_rate_per_key_per_second": None,
            "global_rate_per_key_burst": None,
        }
    }
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT override_poll_interval_ms, overrides_updated_at FROM awa.queue_meta"
            " WHERE queue = 'mail'"
        ).fetchone()
    assert row is not None and row[0] == 500 and row[1] is not None
    assert awa_cli(url, "queue", "overrides", "clear", "mail").exit_code == 0
    again = awa_cli(url, "queue", "overrides", "clear", "mail")
    assert again.exit_code == 1 and "has no overrides" in again.stderr
    assert json.loads(awa_cli(url, "queue", "overrides", "show", "--json").stdout) == {}
    bad = awa_cli(url, "queue", "overrides", "set", "mail")
    assert bad.exit_code == 2 and "at least one override" in bad.stderr
    assert (
        awa_cli(url, "queue", "overrides", "set", "mail", "--claim-batch-size", "0").exit_code == 2
    )
    # The per-key limit (ADR 0029): set, shown, and refused below 1.
    awa_cli(url, "queue", "overrides", "set", "mail", "--max-running-per-key", "3")
    shown = json.loads(awa_cli(url, "queue", "overrides", "show", "mail", "--json").stdout)
    assert shown["mail"]["max_running_per_key"] == 3
    assert "3" in awa_cli(url, "queue", "overrides", "show").stdout
    refused = awa_cli(url, "queue", "overrides", "set", "mail", "--max-running-per-key", "0")
    assert refused.exit_code == 2
    # The fleet-wide rate limits (ADR 0029): set, shown, and bad values refused by name.
    rated = awa_cli(
        url,
        "queue",
        "overrides",
        "set",
        "mail",
        "--global-rate-limit",
        "50",
        "--global-rate-burst",
        "10",
        "--global-rate-limit-per-key",
        "2",
    )
    assert rated.exit_code == 0, rated.output
    shown = json.loads(awa_cli(url, "queue", "overrides", "show", "mail", "--json").stdout)
    assert shown["mail"]["global_rate_per_second"] == 50.0
    assert shown["mail"]["global_rate_burst"] == 10
    assert shown["mail"]["global_rate_per_key_per_second"] == 2.0
    assert shown["mail"]["global_rate_per_key_burst"] is None
    for option, value, field in [
        ("--global-rate-limit", "nan", "global_rate_per_second"),
        ("--global-rate-limit", "-5", "global_rate_per_second"),
        ("--global-rate-limit-per-key", "0", "global_rate_per_key_per_second"),
        ("--global-rate-burst", "0", "global_rate_burst"),
    ]:
        refused = awa_cli(url, "queue", "overrides", "set", "mail", option, value)
        assert refused.exit_code != 0 and field in refused.stderr, (option, refused.output)
    still = json.loads(awa_cli(url, "queue", "overrides", "show", "mail", "--json").stdout)
    assert still == shown


@dataclasses.dataclass
class Hold:
    n: int


def test_a_running_worker_applies_a_deadline_override(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "100")
    url = migrated_database_url

    async def scenario() -> list[timedelta]:
        async with AsyncClient(url) as client:
            release = asyncio.Event()

            @client.task(Hold, queue="held")
            async def hold(job: Job[Hold]) -> None:
                await release.wait()

            await client.start([{"name": "held", "max_workers": 4, "deadline_duration_ms": 60_000}])
            try:
                windows = [await _deadline_window(client, url, 1)]
                await client.set_queue_overrides("held", deadline_ms=5_000)
                # the worker re-reads its overrides every 100 ms: wait until it did
                runtime = client._runtime
                assert runtime is not None
                await until(
                    lambda: runtime.dispatchers[0].settings.deadline == timedelta(seconds=5),
                    "the worker read its new deadline",
                )
                windows.append(await _deadline_window(client, url, 2))
            finally:
                release.set()
                await client.shutdown()
            return windows

    before, after = asyncio.run(scenario())
    assert before == timedelta(seconds=60)
    assert after == timedelta(seconds=5)


async def _deadline_window(client: AsyncClient, url: str, n: int) -> Any:
    job = await client.insert(Hold(n), queue="held")

    async def claimed() -> Any:
        async with await client.transaction() as tx:
            return await tx.fetch_optional(
                "SELECT deadline_at - attempted_at AS window FROM awa.jobs"
                " WHERE id = $1 AND state = 'running'",
                job.id,
            )

    row = await until(claimed, f"job {job.id} claimed")
    return row["window"]
