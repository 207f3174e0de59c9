"""Guarded finalization: every mutation naming an outdated run lease changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from awa.domain.job import RunLease
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, claim_one, enqueue, fetch
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

Mutation = Callable[[EngineHandle, RunLease], Awaitable[Ack]]


async def _first(acks: Awaitable[list[Ack]]) -> Ack:
    (ack,) = await acks
    return ack


MUTATIONS: dict[str, Mutation] = {
    "complete": lambda h, lease: _first(h.engine.complete([lease])),
    "retry": lambda h, lease: h.engine.retry(lease, error="stale"),
    "snooze": lambda h, lease: h.engine.snooze(lease, delay=timedelta(seconds=5)),
    "cancel_attempt": lambda h, lease: h.engine.cancel_attempt(lease, reason="stale"),
    "fail": lambda h, lease: h.engine.fail(lease, error="stale"),
    "release": lambda h, lease: h.engine.release(lease, error="stale"),
    "heartbeat": lambda h, lease: _first(h.engine.heartbeat([lease])),
    "update_progress": lambda h, lease: h.engine.update_progress(
        lease, progress={"p": 1}, metadata_updates={"m": 1}
    ),
    "register_callback": lambda h, lease: h.engine.register_callback(
        lease, callback_id="cb-stale", timeout=timedelta(minutes=1)
    ),
    "wait_for_callback": lambda h, lease: h.engine.wait_for_callback(lease),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
async def test_wrong_lease_number_is_stale(engine: EngineHandle, mutation: str) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.register_callback(
        claim.lease, callback_id="cb-live", timeout=timedelta(minutes=5)
    )
    before = await fetch(engine, claim.job.id)
    engine.clock.advance(1)
    wrong = RunLease(claim.lease.job_id, claim.lease.lease + 1)
    assert await MUTATIONS[mutation](engine, wrong) == Ack.STALE
    assert await fetch(engine, claim.job.id) == before


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
async def test_lease_of_a_finished_attempt_is_stale(engine: EngineHandle, mutation: str) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.complete([claim.lease])
    before = await fetch(engine, claim.job.id)
    engine.clock.advance(1)
    assert await MUTATIONS[mutation](engine, claim.lease) == Ack.STALE
    assert await fetch(engine, claim.job.id) == before


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
async def test_lease_of_a_rescued_attempt_loses_to_the_new_one(
    engine: EngineHandle, mutation: str
) -> None:
    await enqueue(engine)
    old = await claim_one(engine)
    engine.clock.advance(100)
    (rescued,) = await engine.engine.rescue_stale_heartbeats(staleness=timedelta(seconds=30))
    assert rescued.lease == old.lease
    engine.clock.advance(timedelta(hours=1))
    await engine.engine.promote_due()
    new = await claim_one(engine)
    assert new.lease.lease == old.lease.lease + 1
    before = await fetch(engine, new.job.id)
    assert await MUTATIONS[mutation](engine, old.lease) == Ack.STALE
    assert await fetch(engine, new.job.id) == before


async def test_unknown_job_is_stale(engine: EngineHandle) -> None:
    ghost = RunLease(10_000_000, 1)
    for name in sorted(MUTATIONS):
        assert await MUTATIONS[name](engine, ghost) == Ack.STALE, name


async def test_heartbeat_of_a_waiting_attempt_is_stale(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.register_callback(
        claim.lease, callback_id="cb-wait", timeout=timedelta(minutes=5)
    )
    assert await engine.engine.wait_for_callback(claim.lease) == Ack.APPLIED
    assert await engine.engine.heartbeat([claim.lease]) == [Ack.STALE]
    assert (await fetch(engine, claim.job.id)).state == JobState.WaitingExternal


async def test_snooze_of_a_waiting_attempt_is_stale(engine: EngineHandle) -> None:
    await enqueue(engine)
    claim = await claim_one(engine)
    await engine.engine.register_callback(
        claim.lease, callback_id="cb-snooze", timeout=timedelta(minutes=5)
    )
    await engine.engine.wait_for_callback(claim.lease)
    before = await fetch(engine, claim.job.id)
    assert await engine.engine.snooze(claim.lease, delay=timedelta(seconds=5)) == Ack.STALE
    assert await fetch(engine, claim.job.id) == before


async def test_cancelled_running_attempt_cannot_complete(engine: EngineHandle) -> None:
    job = await enqueue(engine)
    claim = await claim_one(engine)
    cancelled = await engine.engine.cancel_job(job.id)
    assert cancelled is not None and cancelled.state == JobState.Cancelled
    assert cancelled.run_lease == claim.lease.lease
    assert await engine.engine.complete([claim.lease]) == [Ack.STALE]
    assert (await fetch(engine, job.id)).state == JobState.Cancelled
    assert await engine.engine.claim(QUEUE, limit=1) == []
