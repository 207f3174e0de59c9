"""The per-job held-back reason (ADR 0029) on every engine: an available job says which
limit holds it back (its key's ``max_running_per_key`` with every slot held, the queue's
or its key's fleet-wide rate limiter with no token) from what the engine's claims keep,
read once per queue and key for a whole list of jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import cast

import attrs
import pytest

from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.held_back import (
    GLOBAL_RATE_LIMIT,
    GLOBAL_RATE_LIMIT_PER_KEY,
    MAX_RUNNING_PER_KEY,
    HeldBack,
)
from awa.domain.job import JobRecord
from awa.domain.overrides import QueueOverrides
from awa.domain.rate_limits import GlobalRateLimit
from awa.entrypoints.held_back import held_back_of
from awa.ports.relations import JobRelations
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, claim_one, enqueue
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

ONE_PER_SECOND = GlobalRateLimit(rate=1.0, burst=1)


async def keyed(handle: EngineHandle, key: str | None) -> JobRecord:
    return await enqueue(handle, metadata={} if key is None else {CONCURRENCY_KEY_METADATA: key})


async def reasons(handle: EngineHandle, jobs: Sequence[JobRecord]) -> dict[int, HeldBack]:
    current = [await handle.engine.get_job(job.id) for job in jobs]
    records = [job for job in current if job is not None]
    return await held_back_of(handle.control, records, handle.clock.now())


async def test_a_full_key_holds_its_waiting_jobs_back(engine: EngineHandle) -> None:
    await engine.control.overrides.set_queue_overrides(QUEUE, QueueOverrides(max_running_per_key=1))
    first, second = await keyed(engine, "tenant-42"), await keyed(engine, "tenant-42")
    other, plain = await keyed(engine, "tenant-7"), await keyed(engine, None)
    jobs = [first, second, other, plain]
    assert await reasons(engine, jobs) == {}

    claim = await claim_one(engine, max_running_per_key=1)
    assert claim.job.id == first.id
    assert await reasons(engine, jobs) == {
        second.id: HeldBack(MAX_RUNNING_PER_KEY, key="tenant-42", running=1, max_running=1)
    }
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await reasons(engine, jobs) == {}


async def test_without_a_limit_in_force_a_full_key_holds_nothing(engine: EngineHandle) -> None:
    first, second = await keyed(engine, "tenant-42"), await keyed(engine, "tenant-42")
    assert (await claim_one(engine, max_running_per_key=1)).job.id == first.id
    assert await reasons(engine, [first, second]) == {}


async def test_the_queue_rate_limiter_holds_jobs_back_until_its_next_admission(
    engine: EngineHandle,
) -> None:
    await engine.control.overrides.set_queue_overrides(
        QUEUE, QueueOverrides(global_rate_per_second=1.0, global_rate_burst=1)
    )
    first, second, third = [await keyed(engine, None) for _ in range(3)]
    assert await reasons(engine, [first, second, third]) == {}
    await claim_one(engine, global_rate_limit=ONE_PER_SECOND)
    now = engine.clock.now()
    held = HeldBack(GLOBAL_RATE_LIMIT, next_admission=now + timedelta(seconds=1))
    assert await reasons(engine, [first, second, third]) == {second.id: held, third.id: held}
    assert held.describe().startswith("held back: queue rate limit (global_rate_limit)")
    engine.clock.advance(timedelta(seconds=1))
    assert await reasons(engine, [second, third]) == {}


async def test_a_key_rate_limiter_holds_only_its_own_keys_jobs(engine: EngineHandle) -> None:
    await engine.control.overrides.set_queue_overrides(
        QUEUE, QueueOverrides(global_rate_per_key_per_second=1.0, global_rate_per_key_burst=1)
    )
    first, second = await keyed(engine, "tenant-42"), await keyed(engine, "tenant-42")
    other = await keyed(engine, "tenant-7")
    claim = await claim_one(engine, global_rate_limit_per_key=ONE_PER_SECOND)
    assert claim.job.id == first.id
    # The first job's attempt runs; its key's limiter has no token for the second.
    assert await reasons(engine, [first, second, other]) == {
        second.id: HeldBack(
            GLOBAL_RATE_LIMIT_PER_KEY,
            key="tenant-42",
            next_admission=engine.clock.now() + timedelta(seconds=1),
        )
    }
    engine.clock.advance(timedelta(seconds=1))
    assert await reasons(engine, [second, other]) == {}


@attrs.define
class CountingRelations:
    inner: JobRelations
    reads: int = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def running_of_keys(
        self, queue: str, keys: Sequence[str], *, running_states: Sequence[str]
    ) -> dict[str, int]:
        self.reads += 1
        return await self.inner.running_of_keys(queue, keys, running_states=running_states)


async def test_a_list_reads_each_queues_keys_once(engine: EngineHandle) -> None:
    await engine.control.overrides.set_queue_overrides(QUEUE, QueueOverrides(max_running_per_key=1))
    jobs = [await keyed(engine, f"tenant-{n % 5}") for n in range(20)]
    for _ in range(5):
        await claim_one(engine, max_running_per_key=1)
    counting = CountingRelations(engine.control.relations)
    control = attrs.evolve(engine.control, relations=cast(JobRelations, counting))
    records = [r for r in [await engine.engine.get_job(j.id) for j in jobs] if r is not None]
    held = await held_back_of(control, records, engine.clock.now())
    assert len(held) == 15
    assert {h.key for h in held.values()} == {f"tenant-{n}" for n in range(5)}
    assert counting.reads == 1
