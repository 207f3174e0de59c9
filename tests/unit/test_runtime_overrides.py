"""Live queue overrides: the domain's guard rails and a running dispatcher picking them up."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.errors import ValidationError
from awa.domain.job import Claim, JobRecord
from awa.domain.overrides import (
    DispatchSettings,
    QueueOverrides,
    apply_overrides,
    validate_overrides,
)
from awa.runtime import HandlerRegistry
from awa.runtime.config import QueueConfig
from awa.runtime.dispatcher import (
    DEFAULT_OVERRIDE_REFRESH,
    QueueDispatcher,
    override_refresh_interval,
)
from awa.runtime.permits import PermitPool
from awa.runtime.rate_limit import TokenBucket
from tests.unit.test_runtime_support import enqueue, fast_config, make_engine, running, wait_until

STARTED = DispatchSettings(0.2, 10, (5.0, 10), timedelta(minutes=5))
UNLIMITED = DispatchSettings(0.2, 10, None, None)


def test_overrides_win_and_missing_ones_keep_the_started_value() -> None:
    settings, ignored = apply_overrides(
        STARTED, QueueOverrides(poll_interval_ms=50, claim_batch_size=64, deadline_ms=2000)
    )
    assert settings == DispatchSettings(0.05, 64, (5.0, 10), timedelta(seconds=2))
    assert ignored == []
    assert apply_overrides(STARTED, None) == (STARTED, [])
    assert apply_overrides(STARTED, QueueOverrides()) == (STARTED, [])
    retuned, _ = apply_overrides(STARTED, QueueOverrides(rate_limit_per_second=1.5))
    assert retuned.rate_limit == (1.5, 10)


def test_guard_rails_never_change_the_claim_mode() -> None:
    settings, ignored = apply_overrides(
        UNLIMITED, QueueOverrides(rate_limit_per_second=2.0, deadline_ms=1000)
    )
    assert settings == UNLIMITED
    assert len(ignored) == 2 and "started without a rate limit" in ignored[0]
    assert "started without a deadline" in ignored[1]
    settings, ignored = apply_overrides(STARTED, QueueOverrides(deadline_ms=0))
    assert settings.deadline == STARTED.deadline and "of 0 ignored" in ignored[0]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (QueueOverrides(poll_interval_ms=0), "poll_interval_ms"),
        (QueueOverrides(claim_batch_size=-1), "claim_batch_size"),
        (QueueOverrides(rate_limit_per_second=float("nan")), "rate_limit_per_second"),
        (QueueOverrides(rate_limit_burst=0), "rate_limit_burst"),
        (QueueOverrides(deadline_ms=-5), "deadline_ms"),
        (QueueOverrides(claim_batch_size=True), "claim_batch_size"),
    ],
)
def test_bad_overrides_are_refused(overrides: QueueOverrides, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_overrides(overrides)
    assert caught.value.field == field


def test_the_refresh_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_OVERRIDE_REFRESH_MS", raising=False)
    assert override_refresh_interval() == DEFAULT_OVERRIDE_REFRESH
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "250")
    assert override_refresh_interval() == 0.25
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "1")
    assert override_refresh_interval() == 0.05


def test_a_retuned_bucket_keeps_earned_tokens_up_to_the_new_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(1.0, 10, monotonic=lambda: now[0])
    bucket.retune(100.0, 4)
    assert bucket.take(10) == 4
    now[0] += 0.02
    assert bucket.take(10) == 2


@pytest.mark.anyio
async def test_a_running_dispatcher_picks_up_overrides_without_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "50")
    engine = make_engine()
    limits: list[int] = []
    claim = engine.claim

    async def recording_claim(queue: str, *, limit: int, **options: Any) -> Any:
        limits.append(limit)
        return await claim(queue, limit=limit, **options)

    engine.claim = recording_claim  # type: ignore[method-assign]
    handlers = HandlerRegistry()
    done: list[JobRecord] = []

    async def handle(job: Any) -> None:
        done.append(job)

    handlers.register("work", handle, queue="default")
    config = fast_config(handlers, [{"name": "default", "max_workers": 50, "claim_batch_size": 2}])
    async with running(engine, handlers, config) as runtime:
        (dispatcher,) = runtime.dispatchers
        assert runtime.control is not None
        overrides = runtime.control.overrides
        await enqueue(engine, "work", 10)
        await wait_until(lambda: len(done) == 10)
        assert max(limits) == 2
        await overrides.set_queue_overrides("default", QueueOverrides(claim_batch_size=20))
        await wait_until(lambda: dispatcher.settings.claim_batch_size == 20)
        limits.clear()
        await enqueue(engine, "work", 30)
        await wait_until(lambda: len(done) == 40)
        assert max(limits) == 20
        await overrides.clear_queue_overrides("default")
        await wait_until(lambda: dispatcher.settings.claim_batch_size == 2)


class _StalledOverrides:
    """An override store whose reads after the first wait until ``release`` is set (a
    database slow to answer); the first returns a claim batch of 3 at once."""

    def __init__(self) -> None:
        self.reads = 0
        self.stalled = anyio.Event()
        self.release = anyio.Event()

    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        self.reads += 1
        if self.reads > 1:
            self.stalled.set()
            await self.release.wait()
        return QueueOverrides(claim_batch_size=3)

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        raise NotImplementedError

    async def clear_queue_overrides(self, queue: str) -> bool:
        raise NotImplementedError

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        raise NotImplementedError


@pytest.mark.anyio
async def test_an_override_read_never_holds_up_a_claim() -> None:
    """The overrides are read before the first claim, then beside the claims: a claim
    due while a read is outstanding goes at once (a read on the claim's path cost its
    jobs a round trip every refresh; issue 39)."""
    clock = ManualClock()
    engine = InMemoryEngine(clock=clock)
    store = _StalledOverrides()
    config = QueueConfig(name="q", max_workers=8)
    spawned: list[Claim] = []
    started = anyio.Event()

    def spawn(_queue: str, claim: Claim) -> None:
        spawned.append(claim)
        started.set()

    dispatcher = QueueDispatcher(
        config,
        engine,
        PermitPool([config], None),
        poll_interval=3600.0,
        spawn=spawn,
        overrides=store,
        override_refresh=10.0,
        clock=clock,
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(dispatcher.run)
            # read at start, before any claim
            assert store.reads == 1 and dispatcher.settings.claim_batch_size == 3
            clock.advance(11.0)
            await enqueue(engine, "send", queue="q")
            dispatcher.wake()
            await started.wait()
            await store.stalled.wait()
            assert len(spawned) == 1 and not store.release.is_set()
            store.release.set()
            dispatcher.stop()
    assert store.reads == 2
