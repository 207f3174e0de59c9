"""Transactional enqueue: commit makes jobs visible and wakes listeners; rollback erases."""

from __future__ import annotations

import pytest

from awa.domain.errors import UniqueConflict
from awa.domain.states import JobState
from tests.contract._support import QUEUE, enqueue, fetch
from tests.contract._support import spec as make_spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

CHANNEL = f"awa:{QUEUE}"


class Abort(Exception):
    pass


async def test_commit_makes_jobs_visible(engine: EngineHandle) -> None:
    async with engine.engine.transaction() as uow:
        jobs = await engine.engine.enqueue_many([make_spec("a"), make_spec("b")], uow=uow)
        assert [job.state for job in jobs] == [JobState.Available, JobState.Available]
    assert [await fetch(engine, job.id) for job in jobs] == jobs
    claimed = [claim.job.id for claim in await engine.engine.claim(QUEUE, limit=10)]
    assert claimed == [job.id for job in jobs]


async def test_uncommitted_jobs_are_not_claimable(engine: EngineHandle) -> None:
    async with engine.engine.transaction() as uow:
        (job,) = await engine.engine.enqueue_many([make_spec()], uow=uow)
        assert await engine.engine.claim(QUEUE, limit=10) == []
        assert await engine.engine.get_job(job.id) is None
    assert (await fetch(engine, job.id)).state == JobState.Available


async def test_rollback_leaves_nothing(engine: EngineHandle) -> None:
    with pytest.raises(Abort):
        async with engine.engine.transaction() as uow:
            (job,) = await engine.engine.enqueue_many([make_spec(unique_key=b"k" * 16)], uow=uow)
            raise Abort
    assert await engine.engine.get_job(job.id) is None
    assert await engine.engine.claim(QUEUE, limit=10) == []
    assert all(counts.queue != QUEUE for counts in await engine.engine.queue_counts())
    # The rolled-back job never held its unique key.
    await enqueue(engine, unique_key=b"k" * 16)


async def test_notification_fires_only_after_commit(engine: EngineHandle) -> None:
    subscription = await engine.notifier.subscribe([CHANNEL])
    try:
        await subscription.wait(0.05)
        async with engine.engine.transaction() as uow:
            await engine.engine.enqueue_many([make_spec()], uow=uow)
            assert await subscription.wait(0.2) == set()
        assert CHANNEL in await subscription.wait(5)
    finally:
        await subscription.close()


async def test_rollback_sends_no_notification(engine: EngineHandle) -> None:
    subscription = await engine.notifier.subscribe([CHANNEL])
    try:
        await subscription.wait(0.05)
        with pytest.raises(Abort):
            async with engine.engine.transaction() as uow:
                await engine.engine.enqueue_many([make_spec()], uow=uow)
                raise Abort
        assert await subscription.wait(0.3) == set()
    finally:
        await subscription.close()


async def test_plain_enqueue_notifies_the_queue(engine: EngineHandle) -> None:
    subscription = await engine.notifier.subscribe([CHANNEL, "awa:other"])
    try:
        await subscription.wait(0.05)
        await enqueue(engine)
        assert await subscription.wait(5) == {CHANNEL}
    finally:
        await subscription.close()


async def test_unique_conflict_inside_a_transaction(engine: EngineHandle) -> None:
    await enqueue(engine, unique_key=b"u" * 16)
    with pytest.raises(UniqueConflict):
        async with engine.engine.transaction() as uow:
            await engine.engine.enqueue_many([make_spec("fresh")], uow=uow)
            await engine.engine.enqueue_many([make_spec(unique_key=b"u" * 16)], uow=uow)
    assert len(await engine.engine.claim(QUEUE, limit=10)) == 1


async def test_transaction_sees_its_own_unique_keys(engine: EngineHandle) -> None:
    with pytest.raises(UniqueConflict):
        async with engine.engine.transaction() as uow:
            await engine.engine.enqueue_many([make_spec(unique_key=b"t" * 16)], uow=uow)
            await engine.engine.enqueue_many([make_spec(unique_key=b"t" * 16)], uow=uow)
    assert await engine.engine.claim(QUEUE, limit=10) == []
