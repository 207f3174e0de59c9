"""``awa batch-ops`` and the blocking ``Client`` batch-operation methods against a real,
migrated database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

import awa
from awa.adapters.clock import SystemClock
from awa.entrypoints.cli import cli
from awa.entrypoints.routing import open_postgres_backend
from awa.runtime.batch_runner import BatchRunner

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(migrated_database_url: str) -> Iterator[str]:
    result = CliRunner().invoke(cli, ["--database-url", migrated_database_url, "migrate"])
    assert result.exit_code == 0, result.stderr
    yield migrated_database_url


def awa_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def _run_operations(url: str) -> None:
    async def go() -> None:
        backend = await open_postgres_backend(url)
        engine = backend.engine
        try:
            runner = BatchRunner(
                engine, backend.control.batch_operations, runner_id="cli-test", clock=SystemClock()
            )
            while await runner.step():
                pass
        finally:
            await engine.close()

    asyncio.run(go())


def test_preview_submit_get_list_cancel_purge(url: str) -> None:
    with awa.Client(url) as client:
        ids = [client.insert({"n": n}, kind="mail", queue="mail").id for n in range(3)]
        client.insert({"n": 9}, kind="report")
    spec = '{"priority": 4}'
    shown = awa_cli(url, "batch-ops", "preview", "--op-kind", "set_priority", "--spec", spec,
                    "--filter", '{"queue": "mail"}')  # fmt: skip
    assert shown.exit_code == 0, shown.stderr
    preview = json.loads(shown.stdout)
    assert preview["total_matched"] == 3 and [s["id"] for s in preview["sample"]] == ids

    refused = awa_cli(url, "batch-ops", "submit", "--op-kind", "set_priority", "--spec", spec)
    assert refused.exit_code == 1
    assert "requires a filter or allow_all=true" in refused.stderr

    bad = awa_cli(url, "batch-ops", "submit", "--op-kind", "set_priority", "--spec", "{nope")
    assert bad.exit_code == 2 and "not valid JSON" in bad.stderr

    made = awa_cli(url, "batch-ops", "submit", "--op-kind", "move_queue",
                   "--spec", '{"queue": "slow", "priority": 3}', "--filter", '{"queue": "mail"}',
                   "--submitted-by", "ops")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    op = json.loads(made.stdout)
    assert op["state"] == "pending" and op["submitted_by"] == "ops"
    everything = awa_cli(url, "batch-ops", "submit", "--op-kind", "set_priority", "--spec", spec,
                         "--all")  # fmt: skip
    assert everything.exit_code == 0, everything.stderr
    other = json.loads(everything.stdout)

    cancelled = awa_cli(url, "batch-ops", "cancel", other["id"])
    assert json.loads(cancelled.stdout)["state"] == "cancelling"
    _run_operations(url)

    got = json.loads(awa_cli(url, "batch-ops", "get", op["id"]).stdout)
    assert (got["state"], got["processed"], got["total_matched"]) == ("completed", 3, 3)
    listed = json.loads(awa_cli(url, "batch-ops", "list", "--state", "cancelled").stdout)
    assert [o["id"] for o in listed] == [other["id"]]
    with awa.Client(url) as client:
        job = client.get_job(ids[0])
        assert (job.queue, job.priority) == ("slow", 3)
        assert client.get_batch_operation(op["id"])["state"] == "completed"
        assert len(client.list_batch_operations()) == 2
        preview_sync = client.preview_move_queue("mail", filter={"queue": "slow"})
        assert preview_sync["total_matched"] == 3
        sync_op = client.set_priority(1, filter={"ids": ids[:1]})
        assert client.cancel_batch_operation(sync_op["id"])["state"] == "cancelling"
    _run_operations(url)

    missing = awa_cli(url, "batch-ops", "get", "00000000-0000-0000-0000-000000000000")
    assert missing.exit_code == 1 and "batch operation not found" in missing.stderr
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    purged = awa_cli(url, "batch-ops", "purge", "--before", later, "--limit", "2")
    assert json.loads(purged.stdout) == {"purged": 2}
    with awa.Client(url) as client:
        assert client.purge_batch_operations(datetime.now(UTC) + timedelta(minutes=1)) == 1
        assert client.list_batch_operations() == []
