"""Unique keys: conflicts, release on leaving the state mask, batches and skip paths."""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.domain.errors import UniqueConflict
from awa.domain.states import JobState, states_to_mask
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, claim_one, enqueue, fetch
from tests.contract._support import spec as make_spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

KEY = b"unique-key-00001"
OTHER = b"unique-key-00002"


async def test_conflict_names_the_holder(engine: EngineHandle) -> None:
    holder = await enqueue(engine, unique_key=KEY)
    with pytest.raises(UniqueConflict) as raised:
        await enqueue(engine, unique_key=KEY)
    assert raised.value.job_id in (None, holder.id)
    assert len(await engine.engine.claim(QUEUE, limit=10)) == 1


async def test_key_is_held_through_completion_by_default(engine: EngineHandle) -> None:
    await enqueue(engine, unique_key=KEY)
    claim = await claim_one(engine)
    await engine.engine.complete([claim.lease])
    with pytest.raises(UniqueConflict):
        await enqueue(engine, unique_key=KEY)


async def test_key_is_released_when_the_job_leaves_the_mask(engine: EngineHandle) -> None:
    first = await enqueue(engine, unique_key=KEY)
    claim = await claim_one(engine)
    await engine.engine.fail(claim.lease, error="boom")
    assert (await fetch(engine, first.id)).state == JobState.Failed
    second = await enqueue(engine, unique_key=KEY)
    assert second.id > first.id


async def test_custom_mask_only_guards_listed_states(engine: EngineHandle) -> None:
    mask = states_to_mask({JobState.Available, JobState.Running})
    first = await enqueue(engine, unique_key=KEY, unique_states=mask)
    with pytest.raises(UniqueConflict):
        await enqueue(engine, unique_key=KEY, unique_states=mask)
    claim = await claim_one(engine)
    with pytest.raises(UniqueConflict):
        await enqueue(engine, unique_key=KEY, unique_states=mask)
    await engine.engine.complete([claim.lease])
    second = await enqueue(engine, unique_key=KEY, unique_states=mask)
    assert second.id != first.id
    # A scheduled job is outside this mask, so it neither conflicts nor claims the key.
    scheduled = await enqueue(engine, unique_key=KEY, unique_states=mask, run_at=engine.clock.now())
    assert scheduled.state == JobState.Scheduled


async def test_reentering_the_mask_conflicts_and_changes_nothing(engine: EngineHandle) -> None:
    mask = states_to_mask({JobState.Available, JobState.Running})
    first = await enqueue(engine, unique_key=KEY, unique_states=mask)
    claim = await claim_one(engine)
    await engine.engine.fail(claim.lease, error="boom")
    second = await enqueue(engine, unique_key=KEY, unique_states=mask)
    before = await fetch(engine, first.id)
    with pytest.raises(UniqueConflict):
        await engine.engine.retry_job(first.id)
    assert await fetch(engine, first.id) == before
    await engine.engine.cancel_job(second.id)
    retried = await engine.engine.retry_job(first.id)
    assert retried is not None and retried.state == JobState.Available


async def test_batch_with_a_conflict_inserts_nothing(engine: EngineHandle) -> None:
    await enqueue(engine, unique_key=KEY)
    with pytest.raises(UniqueConflict):
        await engine.engine.enqueue_many(
            [make_spec("a"), make_spec("b", unique_key=OTHER), make_spec("c", unique_key=KEY)]
        )
    assert len(await engine.engine.claim(QUEUE, limit=10)) == 1
    # OTHER was not left claimed by the refused batch.
    await enqueue(engine, unique_key=OTHER)


async def test_duplicate_inside_one_batch_conflicts(engine: EngineHandle) -> None:
    with pytest.raises(UniqueConflict):
        await engine.engine.enqueue_many(
            [make_spec("a", unique_key=KEY), make_spec("b", unique_key=KEY)]
        )
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_skip_duplicates_inserts_the_rest(engine: EngineHandle) -> None:
    held = await enqueue(engine, unique_key=KEY)
    inserted = await engine.engine.enqueue_many_skip_duplicates(
        [
            make_spec("a"),
            make_spec("b", unique_key=KEY),
            make_spec("c", unique_key=OTHER),
            make_spec("d", unique_key=OTHER),
        ]
    )
    assert [job.kind for job in inserted] == ["a", "c"]
    claimed = {claim.job.id for claim in await engine.engine.claim(QUEUE, limit=10)}
    assert claimed == {held.id, *(job.id for job in inserted)}


async def test_cancel_by_unique_key(engine: EngineHandle) -> None:
    assert await engine.engine.cancel_by_unique_key(KEY) is None
    job = await enqueue(engine, unique_key=KEY)
    cancelled = await engine.engine.cancel_by_unique_key(KEY)
    assert cancelled is not None and cancelled.id == job.id
    assert cancelled.state == JobState.Cancelled
    assert await engine.engine.cancel_by_unique_key(KEY) is None
    replacement = await enqueue(engine, unique_key=KEY)
    claim = await claim_one(engine)
    await engine.engine.complete([claim.lease])
    # The completed holder is terminal: nothing to cancel.
    assert await engine.engine.cancel_by_unique_key(KEY) is None
    assert (await fetch(engine, replacement.id)).state == JobState.Completed


async def test_parking_on_a_callback_follows_the_mask(engine: EngineHandle) -> None:
    """``waiting_external`` is outside the default mask: a parked job gives its key up,
    completes without a conflict, and a key taken meanwhile refuses its resumption."""
    first = await enqueue(engine, unique_key=KEY)
    claim = await claim_one(engine)
    timeout = timedelta(seconds=60)
    await engine.engine.register_callback(claim.lease, callback_id="cb-u", timeout=timeout)
    await engine.engine.wait_for_callback(claim.lease)
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert (await fetch(engine, first.id)).state == JobState.Completed

    await engine.engine.enqueue_many([make_spec(unique_key=OTHER)])
    other = await claim_one(engine)
    await engine.engine.register_callback(other.lease, callback_id="cb-o", timeout=timeout)
    await engine.engine.wait_for_callback(other.lease)
    taken = await enqueue(engine, unique_key=OTHER)
    with pytest.raises(UniqueConflict):
        await engine.engine.resolve_callback("cb-o", action="resume", payload={})
    assert (await fetch(engine, taken.id)).state == JobState.Available
