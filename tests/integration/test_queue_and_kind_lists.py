"""``queue_stats()`` and ``awa queue stats`` list what awa-pg lists: a served queue with no
jobs and a queue whose jobs are all dead-lettered (counted as failed)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from click.testing import CliRunner

import awa
from awa.entrypoints.cli import cli
from tests.differential.rest_seed import wait_state

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Ping:
    n: int


@dataclasses.dataclass
class Boom:
    n: int


async def test_served_and_dead_lettered_queues_are_listed(migrated_database_url: str) -> None:
    url = migrated_database_url
    client = awa.AsyncClient(url)

    @client.task(Ping, queue="served")
    async def ping(job: awa.Job[Ping]) -> None:
        return None

    @client.task(Boom, queue="dead")
    async def boom(job: awa.Job[Boom]) -> None:
        raise RuntimeError("boom")

    await client.start([("served", 1), ("dead", 1)])
    try:
        job = await client.insert(Boom(1), queue="dead", max_attempts=1)
        await wait_state(client, job.id, {"failed"})
        assert await client.move_failed_to_dlq(job.id, "manual") is not None
        stats = {s.queue: s for s in await client.queue_stats()}
        assert sorted(stats) == ["dead", "served"]
        assert (stats["dead"].failed, stats["dead"].total_queued) == (1, 0)
        assert (stats["served"].failed, stats["served"].total_queued) == (0, 0)
        args = ["--database-url", url, "--json", "queue", "stats"]
        # The CLI runs its own event loop, so it runs on a thread of its own.
        result = await asyncio.to_thread(CliRunner().invoke, cli, args, env={"DATABASE_URL": None})
        assert result.exit_code == 0, result.output
        rows = {r["queue"]: r for r in json.loads(result.stdout)}
        assert sorted(rows) == ["dead", "served"] and rows["dead"]["failed"] == 1
    finally:
        await client.shutdown()
        await client.close()
