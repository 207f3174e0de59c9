"""Unique conflict modes (ADR 0034): replace and debounce merge an insert into the
waiting job holding its key; a running holder is not touched."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from awa.domain.errors import UniqueConflict, ValidationError
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.job import JobRecord
from awa.domain.states import JobState, states_to_mask
from awa.domain.unique_conflict import (
    UNIQUE_CONFLICT_METADATA,
    ConflictMode,
    InsertOutcome,
    insert_outcome,
    with_conflict_mode,
)
from tests.contract._support import QUEUE, claim_one, fetch
from tests.contract._support import spec as make_spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

KEY = b"unique-key-conf1"
REPLACE = ConflictMode("replace")
DEBOUNCE = ConflictMode("debounce", 10.0, 60.0)


def _spec(mode: ConflictMode, args: dict[str, Any], **fields: Any) -> Any:
    metadata = with_conflict_mode(fields.pop("metadata", {}), mode)
    return make_spec(unique_key=KEY, args=args, metadata=metadata, **fields)


async def _insert(
    engine: EngineHandle, mode: ConflictMode, args: dict[str, Any], **fields: Any
) -> JobRecord:
    (job,) = await engine.engine.enqueue_many([_spec(mode, args, **fields)])
    return job


async def test_replace_gives_the_waiting_job_the_new_fields(engine: EngineHandle) -> None:
    first = await _insert(engine, REPLACE, {"n": 1}, priority=3, tags=("a",))
    assert insert_outcome(first.metadata) == InsertOutcome.INSERTED
    assert first.state == JobState.Available
    later = engine.clock.now() + timedelta(seconds=30)
    second = await _insert(
        engine, REPLACE, {"n": 2}, priority=1, tags=("b",), run_at=later, metadata={"m": 2}
    )
    assert second.id == first.id
    assert insert_outcome(second.metadata) == InsertOutcome.REPLACED
    stored = await fetch(engine, first.id)
    assert (stored.args, stored.priority, stored.tags) == ({"n": 2}, 1, ("b",))
    assert stored.state == JobState.Scheduled and stored.run_at == later
    assert stored.metadata["m"] == 2
    assert stored.metadata[UNIQUE_CONFLICT_METADATA]["inserts"] == 2
    # Replaced back to now: available again, and one job for the key.
    third = await _insert(engine, REPLACE, {"n": 3})
    assert third.id == first.id and third.state == JobState.Available
    (claim,) = await engine.engine.claim(QUEUE, limit=10)
    assert claim.job.args == {"n": 3}


async def test_debounce_pushes_run_at_out_never_past_max_wait(engine: EngineHandle) -> None:
    start = engine.clock.now()
    first = await _insert(engine, DEBOUNCE, {"n": 1})
    assert first.state == JobState.Scheduled
    assert first.run_at == start + timedelta(seconds=10)
    engine.clock.advance(timedelta(seconds=8))
    second = await _insert(engine, DEBOUNCE, {"n": 2})
    assert second.id == first.id
    assert insert_outcome(second.metadata) == InsertOutcome.DEBOUNCED
    assert second.run_at == start + timedelta(seconds=18)
    engine.clock.advance(timedelta(seconds=47))
    third = await _insert(engine, DEBOUNCE, {"n": 3})
    # now + window would be start + 65 s; max_wait caps it at start + 60 s.
    assert third.run_at == start + timedelta(seconds=60)
    stored = await fetch(engine, first.id)
    assert stored.args == {"n": 3} and stored.state == JobState.Scheduled
    assert stored.metadata[UNIQUE_CONFLICT_METADATA]["inserts"] == 3
    assert await engine.engine.claim(QUEUE, limit=10) == []


async def test_a_running_holder_is_not_replaced(engine: EngineHandle) -> None:
    first = await _insert(engine, REPLACE, {"n": 1})
    claim = await claim_one(engine)
    with pytest.raises(UniqueConflict):
        await _insert(engine, REPLACE, {"n": 2})
    running = await fetch(engine, first.id)
    assert running.state == JobState.Running and running.args == {"n": 1}
    await engine.engine.complete([claim.lease])


async def test_a_mask_without_running_lets_a_new_job_wait_beside_the_running_one(
    engine: EngineHandle,
) -> None:
    mask = states_to_mask({JobState.Scheduled, JobState.Available})
    first = await _insert(engine, DEBOUNCE, {"n": 1}, unique_states=mask)
    engine.clock.advance(timedelta(seconds=10))
    await engine.engine.promote_due()
    claim = await claim_one(engine)
    assert claim.job.id == first.id
    second = await _insert(engine, DEBOUNCE, {"n": 2}, unique_states=mask)
    assert second.id != first.id
    assert insert_outcome(second.metadata) == InsertOutcome.INSERTED
    third = await _insert(engine, DEBOUNCE, {"n": 3}, unique_states=mask)
    assert third.id == second.id and third.args == {"n": 3}


async def test_skip_is_todays_conflict(engine: EngineHandle) -> None:
    await _insert(engine, REPLACE, {"n": 1})
    with pytest.raises(UniqueConflict):
        await engine.engine.enqueue_many([make_spec(unique_key=KEY, args={"n": 2})])


async def test_merges_keep_the_holders_concurrency_key(engine: EngineHandle) -> None:
    first = await _insert(engine, REPLACE, {"n": 1}, metadata={CONCURRENCY_KEY_METADATA: "t-1"})
    second = await _insert(engine, REPLACE, {"n": 2}, metadata={CONCURRENCY_KEY_METADATA: "t-2"})
    assert second.id == first.id
    assert (await fetch(engine, first.id)).metadata[CONCURRENCY_KEY_METADATA] == "t-1"


async def test_skip_duplicates_and_batches_merge(engine: EngineHandle) -> None:
    first = await _insert(engine, REPLACE, {"n": 1})
    records = await engine.engine.enqueue_many_skip_duplicates(
        [make_spec("other"), _spec(REPLACE, {"n": 2})]
    )
    assert [r.kind for r in records] == ["other", "contract_job"]
    assert records[1].id == first.id and records[1].args == {"n": 2}
    # Two inserts of one key in one batch: the second merges into the first.
    batch = await engine.engine.enqueue_many([_spec(REPLACE, {"n": 3}), _spec(REPLACE, {"n": 4})])
    assert {r.id for r in batch} == {first.id}
    assert (await fetch(engine, first.id)).args == {"n": 4}


async def test_merge_inside_a_transaction(engine: EngineHandle) -> None:
    first = await _insert(engine, DEBOUNCE, {"n": 1})
    async with engine.engine.transaction() as uow:
        (merged,) = await engine.engine.enqueue_many([_spec(DEBOUNCE, {"n": 2})], uow=uow)
        assert merged.id == first.id
    stored = await fetch(engine, first.id)
    assert stored.args == {"n": 2}
    assert insert_outcome(stored.metadata) == InsertOutcome.DEBOUNCED


async def test_copy_merges_into_the_waiting_holder(engine: EngineHandle) -> None:
    copy = getattr(engine.engine, "enqueue_many_copy", None)
    if copy is None:
        pytest.skip(f"{engine.name} has no bulk COPY path")
    first = await _insert(engine, REPLACE, {"n": 1})
    try:
        count = await copy([make_spec("other"), _spec(REPLACE, {"n": 2})])
    except ValidationError:
        pytest.skip(f"{engine.name}: COPY needs queue storage as the route")
    assert count == 2
    stored = await fetch(engine, first.id)
    assert stored.args == {"n": 2}
    assert insert_outcome(stored.metadata) == InsertOutcome.REPLACED
