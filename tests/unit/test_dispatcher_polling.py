"""Polling that follows the work (ADR 0015 amendment): while no notification can wake the
claim loops, a claim that found jobs is followed by the next one POLL_FOLLOW later, and
each claim that comes back empty doubles the wait up to the poll interval."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.job import Claim
from awa.runtime.config import QueueConfig
from awa.runtime.dispatcher import POLL_FOLLOW, QueueDispatcher
from awa.runtime.permits import PermitPool
from tests.unit.test_runtime_support import enqueue

POLL = 1.0


class _TimedEngine(InMemoryEngine):
    """Records when each claim ran (on the manual clock) and how many jobs it took."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self._timing_clock = clock
        self.claims: list[tuple[float, int]] = []

    async def claim(self, queue: str, **kwargs: Any) -> list[Claim]:
        got = await super().claim(queue, **kwargs)
        self.claims.append((self._timing_clock.monotonic(), len(got)))
        return got


async def _produce(
    polling: bool, jobs: int = 40, every: float = 0.005, idle: float = 3.0
) -> tuple[_TimedEngine, list[float], float]:
    """A producer commits a job every ``every`` seconds and announces nothing; the
    dispatcher polls every POLL seconds and is told it is polling only (or not). Returns
    the engine, each job's wait from its commit to its claim, and when the last job went
    in; the dispatcher runs on for ``idle`` seconds after it."""
    clock = ManualClock()
    engine = _TimedEngine(clock)
    config = QueueConfig(name="q", max_workers=64)
    committed: dict[int, float] = {}
    waits: list[float] = []

    def spawn(_queue: str, claim: Claim) -> None:
        waits.append(clock.monotonic() - committed[claim.lease.job_id])

    dispatcher = QueueDispatcher(
        config,
        engine,
        PermitPool([config], None),
        poll_interval=POLL,
        spawn=spawn,
        override_refresh=3600.0,
        polling=lambda: polling,
        clock=clock,
    )
    async with clock.autojump(), anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        for _ in range(jobs):
            (record,) = await enqueue(engine, "send", queue="q")
            committed[record.id] = clock.monotonic()
            await clock.sleep(every)
        last = clock.monotonic()
        await clock.sleep(idle)
        dispatcher.stop()
    assert len(waits) == jobs
    return engine, waits, last


@pytest.mark.anyio
async def test_polling_only_a_claim_that_found_jobs_is_followed_soon() -> None:
    engine, waits, _ = await _produce(polling=True)
    # Each job is claimed within two follow-up waits of its commit (one claim may just
    # miss it), not a poll interval later.
    assert max(waits) <= 3 * POLL_FOLLOW + 1e-9, waits
    # About one claim per job while they arrive: the follow-ups take jobs.
    busy = [got for _, got in engine.claims if got]
    assert sum(busy) == 40 and len(busy) >= 20


@pytest.mark.anyio
async def test_with_notifications_an_empty_claim_waits_for_one_or_the_poll() -> None:
    # Not polling only: a claim that came back empty waits for a notification (none comes
    # here) or the poll interval, as before.
    _, waits, _ = await _produce(polling=False)
    assert max(waits) >= POLL / 2, waits


@pytest.mark.anyio
async def test_polling_only_empty_claims_double_the_wait_up_to_the_poll_interval() -> None:
    engine, _, last = await _produce(polling=True, jobs=3, every=0.001, idle=6.0)
    after = [at for at, got in engine.claims if at > last + POLL_FOLLOW and not got]
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(after)]
    doubling = list(itertools.takewhile(lambda g: g < POLL, gaps))
    assert len(doubling) >= 5
    assert all(b == pytest.approx(2 * a) for a, b in itertools.pairwise(doubling)), gaps
    # then once a poll interval, no more often
    rest = gaps[len(doubling) :]
    assert len(rest) >= 2 and all(g == pytest.approx(POLL) for g in rest), gaps
