"""A task's retry policy reaches every engine a worker opens: the client's engine (a
handler's failure) and the thread engines (the maintenance leader's rescues, on the
maintenance thread's own engine), because they share the client's registry."""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
import pytest

import awa
from awa.domain.job import RunLease
from awa.domain.states import JobState
from awa.entrypoints import bootstrap

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@attrs.frozen
class Export:
    n: int


@attrs.frozen
class Import:
    n: int


async def test_the_maintenance_engine_rescues_with_the_tasks_policy(
    migrated_database_url: str,
) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:

        @client.task(Export, retry=awa.RetryPolicy(backoff="constant", base=300, jitter=0))
        async def export(job: awa.Job[Export]) -> None:
            return None

        @client.task(Import)
        async def import_(job: awa.Job[Import]) -> None:
            return None

        exported = await client.insert(Export(1))
        imported = await client.insert(Import(1))
        wiring = await client._wiring()
        engine = (await bootstrap.maintenance_engine_factory(wiring)()).engine
        try:
            # Claimed with a deadline already past: the leader's deadline sweep rescues both.
            claims = await engine.claim("default", limit=2, deadline=timedelta(0))
            assert {c.job.id for c in claims} == {exported.id, imported.id}
            rescued = await engine.rescue_expired_deadlines()
            assert {r.lease for r in rescued} == {
                RunLease(exported.id, 1),
                RunLease(imported.id, 1),
            }
        finally:
            await engine.close()
        waits = {}
        for job in (exported, imported):
            row = (await client.get_job(job.id)).record
            assert row.state is JobState.Retryable
            waits[job.id] = row.run_at - datetime.fromisoformat(row.errors[-1]["at"])
        assert waits[exported.id] == timedelta(seconds=300)
        # The kind without a policy: awa-pg's 2^1 s plus up to 25 %.
        assert timedelta(seconds=2) <= waits[imported.id] <= timedelta(seconds=2.5)
    finally:
        await client.close()
