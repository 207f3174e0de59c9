"""A guarded change of a live attempt (progress, callback registration, rescue, ...) takes
the attempt's lease lock before it reads the rings. A ring prune holds the lease locks of
the attempts it carries forward while it asks for ACCESS EXCLUSIVE on a partition; a
writer that read that partition first and then waited for the lock closed a cycle, and
when the writer's deadlock_timeout ran out during prune's wait the writer failed with
``deadlock detected`` (seen in the carry-forward race under a slow embedded server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import psycopg
import pytest

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_lease_lock_order"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    # The engine's sessions report a deadlock after 1 s of waiting (the default); the
    # test's own session (the stand-in for prune) waits longer before it checks.
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        (db,) = conn.execute("SELECT current_database()").fetchone() or ("",)
        conn.execute(f"ALTER DATABASE \"{db}\" SET deadlock_timeout = '1s'")
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


async def test_a_progress_write_waiting_for_a_carried_lease_does_not_deadlock_with_prune(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    (job,) = await engine.enqueue_many([JobSpec(kind="k", queue="q")])
    (claim,) = await engine.claim("q", limit=1, deadline=timedelta(hours=1))
    assert await engine.update_progress(claim.lease, progress={"n": 0}) == Ack.APPLIED
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as prune:
        (slot,) = await (
            await prune.execute(
                f"SELECT lease_slot FROM {SCHEMA}.leases WHERE job_id = %s", [job.id]
            )
        ).fetchone() or (None,)
        assert slot is not None
        # What a lease prune does: hold the lease lock of the attempt it carries ...
        await prune.execute("SET LOCAL deadlock_timeout = '10s'")
        await prune.execute("SET LOCAL lock_timeout = '5s'")
        await prune.execute(
            "SELECT pg_advisory_xact_lock(hashtext('awa.lease:' || %s), (%s %% 2147483647)::int)",
            [SCHEMA, job.id],
        )
        result: list[Ack] = []

        async def write() -> None:
            result.append(await engine.update_progress(claim.lease, progress={"n": 1}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            async with await psycopg.AsyncConnection.connect(
                migrated_database_url, autocommit=True
            ) as watch:

                async def writer_waits() -> bool:
                    cur = await watch.execute(
                        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    )
                    return await cur.fetchone() is not None

                await until(writer_waits, "the writer waits for the lease lock", timeout=10)
            # ... then ask for ACCESS EXCLUSIVE on the lease partition it prunes, while
            # the writer waits for the lease lock.
            await prune.execute(f"LOCK TABLE {SCHEMA}.leases_{slot} IN ACCESS EXCLUSIVE MODE")
            await prune.rollback()
    assert result == [Ack.APPLIED]
    got = await engine.get_job(job.id)
    assert got is not None and got.progress == {"n": 1}
