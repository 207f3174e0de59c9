"""A job's pickup costs the worker one round trip after the notification: one statement
(the claim, already prepared), sent alone and in autocommit, and nothing else on any of
the worker's connections before the handler starts (issue 39, ADR 0037).

The worker reaches Postgres through :class:`~tests.support.wire.WireCounter`, which reads
the protocol and groups each connection's messages into round trips; the runtime runs on a
manual clock, so nothing timed (polls, heartbeats, override reads) happens meanwhile. The
producer writes directly, so only the worker's traffic is counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from awa.adapters._pg.notifier import PostgresNotifier
from awa.adapters.clock import ManualClock
from awa.domain.channels import queue_channel
from awa.domain.job import JobSpec
from awa.entrypoints import bootstrap
from awa.runtime import HandlerRegistry, Runtime, parse_start_args
from tests.support.waits import until
from tests.support.wire import Burst, WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "pickup_rt"


class _Worker:
    """A runtime through the counting proxy; each handler start records the proxy's
    position (in the event loop the proxy counts on)."""

    def __init__(self, wire: WireCounter) -> None:
        self.wire = wire
        self.runtime: Runtime | None = None
        self.started: list[int] = []
        self.started_event = anyio.Event()

    async def handle(self, job: Any) -> None:
        self.started.append(self.wire.mark())
        self.started_event.set()

    async def next_start(self) -> int:
        with anyio.fail_after(10):
            await self.started_event.wait()
        self.started_event = anyio.Event()
        return self.started[-1]

    def settled(self) -> bool:
        """No attempt in flight (its completion acknowledged) and every request of the
        worker answered (a warm-up the last claim started included)."""
        assert self.runtime is not None
        return len(self.runtime.inflight) == 0 and self.wire.idle()


@pytest.fixture
async def worker(migrated_database_url: str) -> AsyncIterator[_Worker]:
    async with WireCounter(migrated_database_url) as wire:
        wiring = await bootstrap.open_wiring(wire.url(), max_connections=6)
        clock = ManualClock()
        await wiring.engine.bind_transition_role("auto")
        notifier = PostgresNotifier(wire.url(), clock=clock)
        handlers = HandlerRegistry()
        worker = _Worker(wire)
        handlers.register("pickup", worker.handle, queue=QUEUE)
        config = parse_start_args(
            [(QUEUE, 4)], handler_queues={QUEUE}, completion_flush_ms=0, poll_interval_ms=1000
        )
        runtime = Runtime(wiring.engine, notifier, None, clock, handlers, config)
        await runtime.start()
        worker.runtime = runtime
        try:
            yield worker
        finally:
            await runtime.shutdown()
            await wiring.close()


async def _enqueue(producer: bootstrap.Wiring, n: int) -> None:
    await producer.engine.enqueue_many([JobSpec(kind="pickup", queue=QUEUE, args={"n": n})])


def _describe(wire: WireCounter, bursts: list[Burst]) -> str:
    return "; ".join(
        f"link {b.link} {b.kinds()} {[t[:60] for t in b.texts(wire.link(b).named)]}" for b in bursts
    )


async def test_pickup_after_a_notification_is_one_round_trip_of_one_statement(
    migrated_database_url: str, worker: _Worker
) -> None:
    wire = worker.wire
    producer = await bootstrap.open_wiring(migrated_database_url, max_connections=2)
    try:
        # Two jobs first: the first claim reads the whole ring and plans the claim of the
        # slot it found its row in; the second runs that one. Then wait until every
        # request of the worker was answered (its completions included).
        for n in range(2):
            await _enqueue(producer, n)
            await worker.next_start()
            await until(worker.settled, "the attempt over and the worker idle", timeout=5)

        mark = wire.mark()
        await _enqueue(producer, 2)
        started = await worker.next_start()
    finally:
        await producer.close()

    on_path = [b for b in wire.since(mark) if b.seq < started]
    # One round trip between the notification and the handler, on every connection of
    # the worker together: the claim, already prepared (Bind/Execute, no Parse), in
    # autocommit (no BEGIN/COMMIT of its own), with no read before or after it.
    assert len(on_path) == 1, _describe(wire, on_path)
    [claim] = on_path
    link = wire.link(claim)
    assert claim.executes == 1, _describe(wire, on_path)
    assert "P" not in claim.kinds(), _describe(wire, on_path)
    [text] = claim.texts(link.named)
    assert "claim_heads" in text, _describe(wire, on_path)
    # The claim was sent on hearing the notification, not on a timer.
    heard = [
        seq
        for listener in wire.links
        for channel, seq in listener.notifications
        if channel == queue_channel(QUEUE) and mark <= seq <= claim.seq
    ]
    assert heard, "the claim went before the job's notification reached the worker"
