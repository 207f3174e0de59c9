"""When the queue-storage engine's group commit sends a batch (ADR 0040): over a local link
inserts wait for the batch on the wire, over a slow link they go alongside it, up to half
the pool. The writes are stand-ins held open by the test; round trips run on the manual
clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import cast

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.group_commit import WAIT_AT_MOST, GroupCommit
from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import JobState

pytestmark = pytest.mark.anyio

SLOW = 0.020  # a 20 ms link


class Writes:
    """A stand-in for the enqueue's write: each call is held open until released, and
    records the kinds it was given."""

    def __init__(self, *, held: bool = True) -> None:
        self.sent: list[list[str]] = []
        self._gates: list[asyncio.Future[None]] = []
        self._held = held

    async def __call__(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent.append([spec.kind for spec in specs])
        self._gates.append(gate)
        if not self._held:
            gate.set_result(None)
        await gate
        return [_record(spec) for spec in specs]

    def release(self, index: int, error: Exception | None = None) -> None:
        if error is None:
            self._gates[index].set_result(None)
        else:
            self._gates[index].set_exception(error)


def _record(spec: JobSpec) -> JobRecord:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    return JobRecord(
        id=hash(spec.kind) & 0xFFFF,
        kind=spec.kind,
        queue=spec.queue,
        args=spec.args,
        state=JobState.Available,
        priority=spec.priority,
        attempt=0,
        max_attempts=spec.max_attempts,
        run_at=at,
        created_at=at,
        metadata={},
        tags=(),
        unique_key=None,
        unique_states=spec.effective_unique_states,
    )


def _group(clock: ManualClock, pool_size: int = 10) -> GroupCommit:
    connections = SimpleNamespace(check_open=lambda: None, pool=SimpleNamespace(max_size=pool_size))
    return GroupCommit(cast(Connections, connections), clock)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _spec(kind: str) -> JobSpec:
    return JobSpec(kind=kind, queue="q")


async def _learn_round_trip(group: GroupCommit, clock: ManualClock, seconds: float) -> None:
    """One insert alone whose write takes ``seconds`` of the clock."""
    writes = Writes()
    alone = asyncio.create_task(group.alone(_spec("probe"), writes))
    await _turns()
    clock.advance(seconds)
    writes.release(0)
    await alone
    assert group.round_trip() == pytest.approx(seconds)


async def _one_batch_on_the_wire(
    group: GroupCommit, writes: Writes
) -> list[asyncio.Task[JobRecord]]:
    """A lone insert and a batch beside it, both held open: the group's batch is on the
    wire."""
    group.in_flight = 1  # the enqueue keeps it; here the test stands in for it
    first = asyncio.create_task(group.alone(_spec("a"), writes))
    second = asyncio.create_task(group.join(_spec("b"), writes))
    await _turns()
    assert writes.sent == [["a"], ["b"]] and group.batches == 1
    return [first, second]


async def test_over_a_local_link_an_insert_waits_for_the_batch_on_the_wire() -> None:
    clock = ManualClock()
    group = _group(clock)
    await _learn_round_trip(group, clock, WAIT_AT_MOST / 2)
    writes = Writes()
    held = await _one_batch_on_the_wire(group, writes)
    later = [asyncio.create_task(group.join(_spec(k), writes)) for k in ("c", "d")]
    await _turns()
    assert writes.sent == [["a"], ["b"]], "nothing goes beside the batch on a local link"
    writes.release(1)
    await _turns()
    # Both waiting inserts go in one batch as soon as the batch on the wire is back.
    assert writes.sent == [["a"], ["b"], ["c", "d"]]
    writes.release(0)
    writes.release(2)
    assert [job.kind for job in await asyncio.gather(*held, *later)] == ["a", "b", "c", "d"]


async def test_over_a_slow_link_an_insert_goes_beside_the_batch_on_the_wire() -> None:
    clock = ManualClock()
    group = _group(clock)
    await _learn_round_trip(group, clock, SLOW)
    assert group.slow_link()
    writes = Writes()
    held = await _one_batch_on_the_wire(group, writes)
    clock.advance(SLOW / 2)  # the writes on the wire are expected back in 10 ms
    late = asyncio.create_task(group.join(_spec("c"), writes))
    await _turns()
    assert writes.sent == [["a"], ["b"], ["c"]] and group.batches == 2
    # It commits (and its caller returns) while the batch before it is still held.
    writes.release(2)
    assert (await late).kind == "c"
    assert not any(task.done() for task in held)
    writes.release(0)
    writes.release(1)
    assert [job.kind for job in await asyncio.gather(*held)] == ["a", "b"]


async def test_over_a_slow_link_an_insert_waits_for_a_write_due_back_within_the_bound() -> None:
    clock = ManualClock()
    group = _group(clock)
    await _learn_round_trip(group, clock, SLOW)
    writes = Writes()
    held = await _one_batch_on_the_wire(group, writes)
    clock.advance(SLOW - WAIT_AT_MOST / 2)  # the writes on the wire are due back in 1 ms
    waiting = asyncio.create_task(group.join(_spec("c"), writes))
    await _turns()
    assert writes.sent == [["a"], ["b"]]
    writes.release(0)  # the lone insert back: the waiting one goes
    await _turns()
    assert writes.sent == [["a"], ["b"], ["c"]]
    writes.release(1)
    writes.release(2)
    assert [job.kind for job in await asyncio.gather(*held, waiting)] == ["a", "b", "c"]


async def test_batches_on_the_wire_are_bounded_by_half_the_pool() -> None:
    clock = ManualClock()
    group = _group(clock, pool_size=6)
    assert group.window == 3
    await _learn_round_trip(group, clock, SLOW)
    writes = Writes()
    held = await _one_batch_on_the_wire(group, writes)
    more = []
    for kind in ("c", "d", "e", "f"):
        more.append(asyncio.create_task(group.join(_spec(kind), writes)))
        await _turns()
    # Two more batches beside the first (three on the wire); the last two wait together.
    assert writes.sent == [["a"], ["b"], ["c"], ["d"]] and group.batches == 3
    writes.release(2)
    await _turns()
    assert writes.sent[-1] == ["e", "f"]
    for index in (0, 1, 3, 4):
        writes.release(index)
    assert len(await asyncio.gather(*held, *more)) == 6
    await group.settle()
    assert group.batches == 0


async def test_each_batch_reports_its_own_error_to_its_own_callers() -> None:
    clock = ManualClock()
    group = _group(clock)
    await _learn_round_trip(group, clock, SLOW)
    writes = Writes()
    held = await _one_batch_on_the_wire(group, writes)
    beside = asyncio.create_task(group.join(_spec("c"), writes))
    await _turns()
    writes.release(1, RuntimeError("batch b failed"))
    writes.release(2)
    writes.release(0)
    assert (await beside).kind == "c"
    assert (await held[0]).kind == "a"
    with pytest.raises(RuntimeError, match="batch b failed"):
        await held[1]


async def test_settle_sends_and_waits_for_an_insert_that_just_joined() -> None:
    clock = ManualClock()
    group = _group(clock)
    writes = Writes(held=False)
    group.in_flight = 1
    joined = asyncio.create_task(group.join(_spec("a"), writes))
    await asyncio.sleep(0)  # it joined; its batch goes on the loop's next turn
    assert [spec.kind for spec, _ in group.pending] == ["a"] and writes.sent == []
    await group.settle()
    assert writes.sent == [["a"]] and group.batches == 0 and not group.pending
    assert (await joined).kind == "a"
