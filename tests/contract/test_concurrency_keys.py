"""Per-key concurrency (ADR 0029) on every engine: a claim under ``max_running_per_key``
takes a keyed job only while its key has fewer live attempts (running or waiting for a
callback) than the limit; every end of an attempt gives the slot back; claims rotate among
keys; jobs without a key and claims without a limit are not limited."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from awa.domain.errors import ValidationError
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, concurrency_key_of
from awa.domain.job import Claim, JobRecord
from awa.ports.storage import Ack, StorageEngine
from tests.contract._support import QUEUE, enqueue, fetch, spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

TIMEOUT = timedelta(minutes=5)


async def keyed(handle: EngineHandle, key: str, count: int = 1) -> list[JobRecord]:
    jobs = []
    for _ in range(count):
        jobs.append(await enqueue(handle, metadata={CONCURRENCY_KEY_METADATA: key}))
    return jobs


async def claim(handle: EngineHandle, per_key: int | None, limit: int = 10) -> list[Claim]:
    return await handle.engine.claim(QUEUE, limit=limit, max_running_per_key=per_key)


def keys_of(claims: list[Claim]) -> Counter[str | None]:
    return Counter(concurrency_key_of(c.job.metadata) for c in claims)


async def test_a_key_runs_no_more_than_its_limit(engine: EngineHandle) -> None:
    a = await keyed(engine, "tenant-a", 3)
    b = await keyed(engine, "tenant-b", 2)
    first = await claim(engine, 1)
    assert [c.job.id for c in first] == [a[0].id, b[0].id]
    assert await claim(engine, 1) == []
    assert await engine.engine.complete([first[0].lease]) == [Ack.APPLIED]
    assert [c.job.id for c in await claim(engine, 1)] == [a[1].id]
    assert await claim(engine, 1) == []


async def test_a_limit_of_two_takes_two_of_a_key(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 5)
    assert keys_of(await claim(engine, 2)) == {"tenant-a": 2}
    assert await claim(engine, 2) == []
    # A lower limit takes nothing more while the key is over it; a higher one tops it up.
    assert await claim(engine, 1) == []
    assert keys_of(await claim(engine, 3)) == {"tenant-a": 1}


def _ends() -> dict[str, Callable[[StorageEngine, Claim], Awaitable[Ack]]]:
    return {
        "complete": lambda e, c: _first(e.complete([c.lease])),
        "retry": lambda e, c: e.retry(c.lease, error="boom", delay=timedelta(hours=1)),
        "fail": lambda e, c: e.fail(c.lease, error="boom"),
        "snooze": lambda e, c: e.snooze(c.lease, delay=timedelta(hours=1)),
        "cancel": lambda e, c: e.cancel_attempt(c.lease, reason="asked"),
        "release": lambda e, c: e.release(c.lease, error="shutting down"),
    }


async def _first(acks: Awaitable[list[Ack]]) -> Ack:
    (ack,) = await acks
    return ack


@pytest.mark.parametrize("end", sorted(_ends()))
async def test_every_end_of_an_attempt_gives_the_slot_back(engine: EngineHandle, end: str) -> None:
    _, second = await keyed(engine, "tenant-a", 2)
    (held,) = await claim(engine, 1)
    assert await claim(engine, 1) == []
    assert await _ends()[end](engine.engine, held) == Ack.APPLIED
    assert [c.job.id for c in await claim(engine, 1)] == [second.id]


async def test_an_attempt_waiting_for_a_callback_holds_its_slot(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 2)
    (held,) = await claim(engine, 1)
    await engine.engine.register_callback(held.lease, callback_id="cb-key", timeout=TIMEOUT)
    assert await engine.engine.wait_for_callback(held.lease) == Ack.APPLIED
    assert await claim(engine, 1) == []


async def test_a_rescue_gives_the_slot_back(engine: EngineHandle) -> None:
    _, second = await keyed(engine, "tenant-a", 2)
    (held,) = await claim(engine, 1)
    engine.clock.advance(100)
    (rescued,) = await engine.engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert rescued.lease == held.lease
    assert [c.job.id for c in await claim(engine, 1)] == [second.id]


async def test_claims_rotate_among_keys(engine: EngineHandle) -> None:
    hot = await keyed(engine, "hot", 20)
    (small,) = await keyed(engine, "small")
    # Round one takes each key's first job: the small key's one job is in the first claim
    # of two, although twenty of the hot key were inserted before it.
    assert [c.job.id for c in await claim(engine, 10, limit=2)] == [hot[0].id, small.id]


async def test_keys_at_their_limit_do_not_take_the_turn_of_a_key_with_room(
    engine: EngineHandle,
) -> None:
    # Six keys with backlogs far larger than a claim, each at its limit of one. The keys
    # are named so that every engine's rotation (key order; queue storage's lane shards
    # follow it for these names) puts a full key between the claimer's cursor and each
    # new key below.
    full = [f"tenant-{n:02d}" for n in range(0, 12, 2)]
    for key in full:
        await keyed(engine, key, 20)
    assert keys_of(await claim(engine, 1, limit=6)) == dict.fromkeys(full, 1)
    # Then one job each for two other keys, three times over: each time the next claim
    # of two takes exactly those jobs. It walks past the full keys instead of offering
    # them its places and coming back short.
    for first in range(1, 12, 4):
        small = [(await keyed(engine, f"tenant-{n:02d}"))[0] for n in (first, first + 2)]
        taken = await claim(engine, 1, limit=2)
        assert sorted(c.job.id for c in taken) == sorted(job.id for job in small), first


async def test_keyed_jobs_copied_in_bulk_are_limited_like_any(engine: EngineHandle) -> None:
    copy = getattr(engine.engine, "enqueue_many_copy", None)
    if copy is None:
        pytest.skip(f"{engine.name} has no bulk COPY path")
    specs = [spec(metadata={CONCURRENCY_KEY_METADATA: key}) for key in ("a", "b") * 3]
    try:
        assert await copy([*specs, spec()]) == 7
    except ValidationError:
        pytest.skip(f"{engine.name}: COPY needs queue storage as the route")
    # Each key's jobs are in its own lane: one each under a limit of one, and the keyless
    # job beside them.
    assert keys_of(await claim(engine, 1)) == {"a": 1, "b": 1, None: 1}
    assert await claim(engine, 1) == []


async def test_jobs_without_a_key_are_not_limited(engine: EngineHandle) -> None:
    plain = [await enqueue(engine) for _ in range(3)]
    (a, _) = await keyed(engine, "tenant-a", 2)
    taken = await claim(engine, 1)
    assert sorted(c.job.id for c in taken) == sorted([*(j.id for j in plain), a.id])


async def test_without_a_limit_keys_are_not_counted(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 3)
    assert keys_of(await claim(engine, None)) == {"tenant-a": 3}


async def test_the_key_stays_with_the_job_through_a_retry(engine: EngineHandle) -> None:
    (job,) = await keyed(engine, "tenant-a")
    (held,) = await claim(engine, 1)
    await engine.engine.retry(held.lease, error="boom", delay=timedelta(seconds=1))
    engine.clock.advance(5)
    await engine.engine.promote_due()
    (again,) = await claim(engine, 1)
    assert again.job.id == job.id
    assert concurrency_key_of((await fetch(engine, job.id)).metadata) == "tenant-a"


async def test_concurrent_claimers_never_pass_the_limit(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 12)
    await keyed(engine, "tenant-b", 12)
    results = await asyncio.gather(*(claim(engine, 2, limit=3) for _ in range(6)))
    taken = keys_of([c for got in results for c in got])
    assert taken == {"tenant-a": 2, "tenant-b": 2}


async def test_without_a_limit_every_key_drains_in_its_order(engine: EngineHandle) -> None:
    # More keys than a claim's batch: however an engine chooses among keys (queue storage
    # visits a rotating window of them), every job is claimed once, each key's in the
    # order they were inserted, and jobs without a key beside them.
    jobs = [
        await enqueue(engine, metadata={CONCURRENCY_KEY_METADATA: f"tenant-{k}"})
        for _ in range(3)
        for k in range(12)
    ]
    jobs += [await enqueue(engine) for _ in range(2)]
    taken: list[Claim] = []
    while got := await claim(engine, None, limit=5):
        taken += got
    expected: dict[str | None, list[int]] = {}
    for job in jobs:
        expected.setdefault(concurrency_key_of(job.metadata), []).append(job.id)
    claimed: dict[str | None, list[int]] = {}
    for c in taken:
        claimed.setdefault(concurrency_key_of(c.job.metadata), []).append(c.job.id)
    assert claimed == expected
