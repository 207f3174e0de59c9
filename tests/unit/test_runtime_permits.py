"""Permit pools, token buckets and the waker, without storage."""

from __future__ import annotations

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.runtime.config import QueueConfig
from awa.runtime.permits import PermitPool
from awa.runtime.rate_limit import TokenBucket
from awa.runtime.wake import Waker


def test_hard_reserved_pools_are_independent() -> None:
    pool = PermitPool([QueueConfig("a", max_workers=3), QueueConfig("b", max_workers=1)], None)
    assert pool.try_reserve("a", 10) == 3
    assert pool.try_reserve("a", 1) == 0
    assert pool.try_reserve("b", 5) == 1
    assert pool.available("a") == 0
    pool.release("a", 2)
    assert pool.available("a") == 2 and pool.in_flight("a") == 1
    with pytest.raises(RuntimeError):
        pool.release("b", 2)


def test_release_wakes_only_interested_listeners() -> None:
    pool = PermitPool([QueueConfig("a", max_workers=2), QueueConfig("b", max_workers=2)], None)
    woken: list[str] = []
    pool.add_listener("a", lambda: woken.append("a"))
    pool.add_listener("b", lambda: woken.append("b"))
    pool.try_reserve("a", 2)
    pool.release("a", 1)
    pool.release("a", 1, wake_self=False)
    assert woken == ["a"]


def _weighted(min_a: int = 0, min_b: int = 0) -> PermitPool:
    return PermitPool(
        [
            QueueConfig("a", max_workers=None, min_workers=min_a, weight=2),
            QueueConfig("b", max_workers=None, min_workers=min_b, weight=1),
        ],
        12,
    )


def test_weighted_is_work_conserving_when_alone() -> None:
    pool = _weighted()
    assert pool.try_reserve("a", 100) == 12
    assert pool.overflow_held("a") == 12


def test_weighted_min_workers_are_guaranteed() -> None:
    pool = _weighted(min_b=3)
    assert pool.try_reserve("a", 100) == 9
    assert pool.try_reserve("b", 100) == 3
    assert pool.overflow_held("b") == 0


def test_weighted_overflow_converges_to_weights() -> None:
    pool = _weighted()
    pool.try_reserve("a", 12)
    assert pool.try_reserve("b", 5) == 0  # marks b as wanting overflow
    # As a's handlers finish, a may only re-take up to its 2/3 share.
    for _ in range(30):
        pool.release("a", 1)
        pool.try_reserve("b", 1)
        pool.try_reserve("a", 1)
        if pool.in_flight("a") <= 8 and pool.in_flight("a") + pool.in_flight("b") == 12:
            break
    assert pool.in_flight("a") == 8
    assert pool.in_flight("b") == 4


def test_weighted_per_queue_cap() -> None:
    pool = PermitPool([QueueConfig("a", max_workers=2, min_workers=0)], 10)
    assert pool.try_reserve("a", 5) == 2


def test_token_bucket_refills_at_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(5.0, 2, monotonic=lambda: now[0])
    assert bucket.take(10) == 2
    assert bucket.take(1) == 0
    assert bucket.seconds_until_token() == pytest.approx(0.2)
    now[0] = 0.4
    assert bucket.take(10) == 2
    bucket.refund(1)
    assert bucket.take(5) == 1
    now[0] = 100.0
    assert bucket.tokens == 2  # capped at burst


@pytest.mark.anyio
async def test_waker_remembers_an_early_wake() -> None:
    clock = ManualClock()
    waker = Waker(clock)
    waker.wake()
    assert await waker.wait(5.0) is True
    results: list[bool] = []

    async def wait(timeout: float) -> None:
        results.append(await waker.wait(timeout))

    async with anyio.create_task_group() as tg:
        # a wait that nobody wakes ends at its timeout on the clock, not before
        tg.start_soon(wait, 0.02)
        await clock.elapse(0.019)
        assert results == []
        await clock.elapse(0.001)
        assert results == [False]
        # one woken meanwhile returns at once, long before its timeout
        tg.start_soon(wait, 5.0)
        await clock.elapse(0.01)
        waker.wake()
        await clock.settle()
        assert results == [False, True]
