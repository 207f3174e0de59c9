"""The notifier and the leader lock that come with every engine."""

from __future__ import annotations

import pytest

from awa.ports.leader import LeaderLock
from tests.contract._support import enqueue
from tests.support.engines import EngineHandle
from tests.support.waits import until

pytestmark = pytest.mark.anyio


async def test_notifications_between_waits_are_kept(engine: EngineHandle) -> None:
    subscription = await engine.notifier.subscribe(["awa:a", "awa:b"])
    try:
        await subscription.wait(0.05)
        await enqueue(engine, queue="a")
        await enqueue(engine, queue="b")
        await enqueue(engine, queue="c")
        fired: set[str] = set()
        for _ in range(20):
            fired |= await subscription.wait(0.25)
            if fired == {"awa:a", "awa:b"}:
                break
        assert fired == {"awa:a", "awa:b"}
        assert await subscription.wait(0.1) == set()
    finally:
        await subscription.close()


async def test_scheduled_enqueue_does_not_wake_the_queue(engine: EngineHandle) -> None:
    subscription = await engine.notifier.subscribe(["awa:later"])
    try:
        await subscription.wait(0.05)
        await enqueue(engine, queue="later", run_at=engine.clock.now())
        assert await subscription.wait(0.3) == set()
    finally:
        await subscription.close()


TTL = 30.0


async def test_leader_lock_first_holder_wins_until_release(engine: EngineHandle) -> None:
    first, second = engine.leader_lock(), engine.leader_lock()
    try:
        taken = await first.try_acquire(TTL)
        assert taken.held is True
        assert taken.expires_in == pytest.approx(TTL)
        renewed = await first.try_acquire(TTL)
        assert renewed.held is True
        # A renewal keeps the term: the same leader, uninterrupted.
        assert renewed.term == taken.term
        assert await first.still_held() is True
        refused = await second.try_acquire(TTL)
        assert refused.held is False
        # The follower learns who holds it and for how long, to try again then.
        assert refused.holder == renewed.holder
        assert 0 < refused.expires_in <= TTL
        assert await second.still_held() is False
        await second.release()
        assert await first.still_held() is True
        await first.release()
        await first.release()
        assert await first.still_held() is False
        # Released means free at once, and a new holder starts the next term.
        after = await second.try_acquire(TTL)
        assert after.held is True
        assert after.term > taken.term
        assert (await first.try_acquire(TTL)).held is False
    finally:
        await first.release()
        await second.release()


async def _until_lapsed(engine: EngineHandle, holder: LeaderLock, ttl: float) -> None:
    """Let the lease run out: the manual clock moves past it; a Postgres lease reads the
    server's clock, so poll until the store says it ended."""
    engine.clock.advance(ttl + 0.1)

    async def lapsed() -> bool:
        return not await holder.still_held()

    await until(lapsed, "the unrenewed lease ended", timeout=5, interval=0.05)


async def test_a_lease_that_is_not_renewed_ends_and_changes_hands(engine: EngineHandle) -> None:
    ttl = 0.3
    first, second = engine.leader_lock(), engine.leader_lock()
    try:
        taken = await first.try_acquire(ttl)
        assert taken.held
        # Nobody renews it: it ends, and a follower takes over.
        await _until_lapsed(engine, first, ttl)
        took = await second.try_acquire(TTL)
        assert took.held is True
        assert took.term == taken.term + 1
        # The old holder cannot renew its way back in; it is told who leads now.
        late = await first.try_acquire(TTL)
        assert late.held is False
        assert late.holder == took.holder
        assert late.term == took.term
        assert await second.still_held() is True
    finally:
        await first.release()
        await second.release()
