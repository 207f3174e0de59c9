"""The notifier and the leader lock that come with every engine."""

from __future__ import annotations

import pytest

from tests.contract._support import enqueue
from tests.support.engines import EngineHandle

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


async def test_leader_lock_first_holder_wins_until_release(engine: EngineHandle) -> None:
    first, second = engine.leader_lock(), engine.leader_lock()
    try:
        assert await first.try_acquire() is True
        assert await first.try_acquire() is True
        assert await first.still_held() is True
        assert await second.try_acquire() is False
        assert await second.still_held() is False
        await second.release()
        assert await first.still_held() is True
        await first.release()
        await first.release()
        assert await first.still_held() is False
        assert await second.try_acquire() is True
        assert await first.try_acquire() is False
    finally:
        await first.release()
        await second.release()
