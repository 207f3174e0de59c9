"""Fleet-wide rate limits (ADR 0029, "Rate limits") on every engine: a claim under
``global_rate_limit`` takes at most what the queue's limiter admits (``burst`` at once,
then ``max_rate`` per second), under ``global_rate_limit_per_key`` at most what each key's
limiter admits; the limiters live in the engine's store (so every claimer shares them) and
are moved in the claim's own transaction; a claim without a limit is not limited."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, concurrency_key_of
from awa.domain.job import Claim, ClaimBatch
from awa.domain.rate_limits import GlobalRateLimit, key_limiter
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, enqueue, enqueue_n
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

ONE_PER_SECOND_BURST_3 = GlobalRateLimit(rate=1.0, burst=3)


async def keyed(handle: EngineHandle, key: str, count: int) -> None:
    for _ in range(count):
        await enqueue(handle, metadata={CONCURRENCY_KEY_METADATA: key})


async def rated(
    handle: EngineHandle,
    rate: GlobalRateLimit | None,
    per_key: GlobalRateLimit | None = None,
    limit: int = 50,
    max_running_per_key: int | None = None,
) -> list[Claim]:
    return await handle.engine.claim(
        QUEUE,
        limit=limit,
        global_rate_limit=rate,
        global_rate_limit_per_key=per_key,
        max_running_per_key=max_running_per_key,
    )


def by_key(claims: list[Claim]) -> Counter[str | None]:
    return Counter(concurrency_key_of(c.job.metadata) for c in claims)


async def test_the_burst_then_the_rate(engine: EngineHandle) -> None:
    await enqueue_n(engine, 20)
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 3
    assert await rated(engine, ONE_PER_SECOND_BURST_3) == []
    engine.clock.advance(timedelta(seconds=1))
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 1
    engine.clock.advance(timedelta(milliseconds=999))
    assert await rated(engine, ONE_PER_SECOND_BURST_3) == []
    engine.clock.advance(timedelta(milliseconds=1))
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 1
    # An idle limiter fills up to its burst and no further.
    engine.clock.advance(timedelta(hours=1))
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 3
    assert await rated(engine, ONE_PER_SECOND_BURST_3) == []


async def test_tokens_are_spent_only_on_jobs_taken(engine: EngineHandle) -> None:
    await enqueue_n(engine, 1)
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 1
    await enqueue_n(engine, 5)
    # The empty claims before did not spend the rest of the burst.
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 2


async def test_a_claim_held_back_says_so(engine: EngineHandle) -> None:
    await enqueue_n(engine, 6)
    first = await rated(engine, ONE_PER_SECOND_BURST_3, limit=5)
    assert len(first) == 3
    assert isinstance(first, ClaimBatch) and first.rate_limited == 2
    second = await rated(engine, ONE_PER_SECOND_BURST_3, limit=5)
    assert isinstance(second, ClaimBatch) and len(second) == 0
    assert second.rate_limited > 0
    assert second.next_admission == engine.clock.now() + timedelta(seconds=1)


async def test_concurrent_claims_share_one_limiter(engine: EngineHandle) -> None:
    await enqueue_n(engine, 40)
    limit = GlobalRateLimit(rate=2.0, burst=5)
    got = await asyncio.gather(*(rated(engine, limit, limit=4) for _ in range(8)))
    assert sum(len(claims) for claims in got) == 5
    ids = [c.job.id for claims in got for c in claims]
    assert len(set(ids)) == len(ids)


async def test_no_limit_claims_as_before(engine: EngineHandle) -> None:
    await enqueue_n(engine, 10)
    assert len(await rated(engine, ONE_PER_SECOND_BURST_3)) == 3
    # Another claimer of the queue without the limit is not held back by its limiter.
    assert len(await engine.engine.claim(QUEUE, limit=50)) == 7


async def test_each_key_has_its_own_limiter(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 5)
    await keyed(engine, "tenant-b", 5)
    await enqueue_n(engine, 3)
    per_key = GlobalRateLimit(rate=1.0, burst=2)
    first = await rated(engine, None, per_key)
    assert by_key(first) == {"tenant-a": 2, "tenant-b": 2, None: 3}
    second = await rated(engine, None, per_key)
    assert second == []
    # Held back by their keys' limiters (at least one job of each key is counted).
    assert isinstance(second, ClaimBatch) and second.rate_limited >= 2
    engine.clock.advance(timedelta(seconds=1))
    assert by_key(await rated(engine, None, per_key)) == {"tenant-a": 1, "tenant-b": 1}


async def test_per_key_and_queue_limits_together(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 5)
    await keyed(engine, "tenant-b", 5)
    queue_limit = GlobalRateLimit(rate=1.0, burst=3)
    per_key = GlobalRateLimit(rate=1.0, burst=2)
    first = await rated(engine, queue_limit, per_key)
    assert len(first) == 3
    assert max(by_key(first).values()) == 2
    engine.clock.advance(timedelta(seconds=10))
    second = await rated(engine, queue_limit, per_key)
    assert len(second) == 3 and max(by_key(second).values()) <= 2


async def test_per_key_rate_with_max_running_per_key(engine: EngineHandle) -> None:
    await keyed(engine, "tenant-a", 5)
    per_key = GlobalRateLimit(rate=100.0, burst=10)
    first = await rated(engine, None, per_key, max_running_per_key=1)
    assert by_key(first) == {"tenant-a": 1}
    blocked = await rated(engine, None, per_key, max_running_per_key=1)
    assert blocked == []
    assert isinstance(blocked, ClaimBatch) and blocked.concurrency_limited >= 1
    assert await engine.engine.complete([first[0].lease]) == [Ack.APPLIED]
    assert by_key(await rated(engine, None, per_key, max_running_per_key=1)) == {"tenant-a": 1}


async def test_a_retuned_limit_applies_to_the_same_limiter(engine: EngineHandle) -> None:
    await enqueue_n(engine, 30)
    assert len(await rated(engine, GlobalRateLimit(rate=1.0, burst=2))) == 2
    # Raised live: the limiter's state carries over, the new rate refills it.
    # Retuned live: the limiter's state carries over (its 1 s backlog), and the new
    # interval (0.1 s) and burst apply to what is left of it.
    faster = GlobalRateLimit(rate=10.0, burst=10)
    engine.clock.advance(timedelta(seconds=1))
    assert await rated(engine, faster) == []
    engine.clock.advance(timedelta(milliseconds=500))
    assert len(await rated(engine, faster)) == 5


async def test_idle_limiters_are_pruned_once_refilled(engine: EngineHandle) -> None:
    limiters = engine.control.rate_limiters
    await keyed(engine, "tenant-a", 4)
    await keyed(engine, "tenant-b", 1)
    per_key = GlobalRateLimit(rate=1.0, burst=2)
    queue_limit = GlobalRateLimit(rate=10.0, burst=5)
    # tenant-a takes its burst of 2 (refilled 2 s later), tenant-b 1 (refilled after 1 s);
    # the queue's limiter spent 3 of 5 tokens at 0.1 s each (refilled after 0.3 s).
    assert len(await rated(engine, queue_limit, per_key)) == 3
    names = {(s.queue, s.limiter) for s in await limiters.limiter_states()}
    assert len(names) == 3
    now = engine.clock.now()
    # Nothing is idle yet; the limit caps how many go in one call.
    assert await limiters.prune_idle_limiters(now=now, limit=10) == 0
    engine.clock.advance(timedelta(seconds=1))
    assert await limiters.prune_idle_limiters(now=engine.clock.now(), limit=1) == 1
    assert await limiters.prune_idle_limiters(now=engine.clock.now(), limit=10) == 1
    (left,) = await limiters.limiter_states()
    assert left.limiter == key_limiter("tenant-a")
    # tenant-a has not refilled: its row still holds its one job back.
    assert by_key(await rated(engine, queue_limit, per_key)) == {"tenant-a": 1}
    engine.clock.advance(timedelta(seconds=5))
    assert await limiters.prune_idle_limiters(now=engine.clock.now(), limit=10) == 2
    assert await limiters.limiter_states() == []
    # A pruned limiter admits what a refilled one would: the whole burst.
    await keyed(engine, "tenant-b", 3)
    assert by_key(await rated(engine, queue_limit, per_key)) == {"tenant-a": 1, "tenant-b": 2}


@pytest.mark.parametrize("max_running_per_key", [None, 5])
async def test_a_key_without_a_token_gives_its_place_to_the_next(
    engine: EngineHandle, max_running_per_key: int | None
) -> None:
    # Four keys spend their one token each; then a fifth key gets a job. A claim of one
    # place must take it: the spent keys come first in the claimer's rotation (queue
    # storage's lane shards follow these names' order, and the cursor is past the last
    # key it walked), and each gives its place to the next key instead of holding it
    # without a token.
    per_key = GlobalRateLimit(rate=1 / 3600, burst=1)
    spent = [f"tenant-{n:02d}" for n in range(0, 8, 2)]
    for key in spent:
        await keyed(engine, key, 2)
    first = await rated(engine, None, per_key, limit=4, max_running_per_key=max_running_per_key)
    assert by_key(first) == dict.fromkeys(spent, 1)
    await keyed(engine, "tenant-01", 1)
    got = await rated(engine, None, per_key, limit=1, max_running_per_key=max_running_per_key)
    assert by_key(got) == {"tenant-01": 1}
