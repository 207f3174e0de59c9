"""Units of work on the canonical engine: pooled transactions and callers' connections."""

from __future__ import annotations

import psycopg
import pytest

from awa.adapters.postgres_canonical import CanonicalEngine
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobSpec
from awa.ports.storage import JobFilter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

KEY = b"k" * 16


async def test_callers_connection_commits_and_rolls_back_with_its_transaction(
    migrated_database_url: str,
) -> None:
    engine = await CanonicalEngine.open(migrated_database_url)
    try:
        async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
            uow = engine.unit_of_work_for(conn)
            (rolled_back,) = await engine.enqueue_many([JobSpec(kind="a")], uow=uow)
            await conn.rollback()
            assert await engine.get_job(rolled_back.id) is None

            (kept,) = await engine.enqueue_many([JobSpec(kind="b")], uow=uow)
            assert await engine.get_job(kept.id) is None  # not committed yet
            await conn.commit()
            assert await engine.get_job(kept.id) == kept

            # A clash in the caller's transaction undoes only the failed batch.
            await engine.enqueue_many([JobSpec(kind="u", unique_key=KEY)])
            (before,) = await engine.enqueue_many([JobSpec(kind="c")], uow=uow)
            with pytest.raises(UniqueConflict):
                await engine.enqueue_many([JobSpec(kind="u", unique_key=KEY)], uow=uow)
            await conn.commit()
            assert await engine.get_job(before.id) == before
    finally:
        await engine.close()


async def test_unique_conflict_inside_a_unit_of_work_keeps_it_usable(
    migrated_database_url: str,
) -> None:
    # A single connection proves the holder lookup does not need a second one.
    engine = await CanonicalEngine.open(migrated_database_url, max_connections=1)
    try:
        (holder,) = await engine.enqueue_many([JobSpec(kind="once", unique_key=KEY)])
        with pytest.raises(UniqueConflict) as clash:
            await engine.enqueue_many([JobSpec(kind="once", unique_key=KEY)])
        assert clash.value.job_id == holder.id

        async with engine.transaction() as uow:
            with pytest.raises(UniqueConflict):
                await engine.enqueue_many(
                    [JobSpec(kind="other"), JobSpec(kind="once", unique_key=KEY)], uow=uow
                )
            (survivor,) = await engine.enqueue_many([JobSpec(kind="after")], uow=uow)
        assert await engine.get_job(survivor.id) == survivor
        kinds = sorted(job.kind for job in await engine.list_jobs(JobFilter()))
        assert kinds == ["after", "once"]
    finally:
        await engine.close()
