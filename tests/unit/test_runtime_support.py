"""Helpers shared by the runtime tests (no tests here).

The runtime runs on the engine's :class:`ManualClock` inside ``clock.autojump``: every
timer it arms (polls, heartbeats, flushes, the leader's lease, drain timeouts) fires in
simulated time once every task waits, so the tests neither sleep nor depend on how busy
the host is. While a handler thread works the clock stands still.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.to_thread

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.inmemory.runtime_registry import InMemoryRuntimeRegistry
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import NO_JITTER
from awa.entrypoints.routing import inmemory_control_plane
from awa.ports.control_plane import ControlPlane
from awa.runtime import HandlerRegistry, Runtime, RuntimeConfig, parse_start_args
from awa.runtime.descriptors import DescriptorService
from awa.runtime.heartbeat import EngineFactory

FAST: dict[str, Any] = {
    "poll_interval_ms": 20,
    "heartbeat_interval_ms": 30,
    "promote_interval_ms": 20,
    "leader_election_interval_ms": 30,
    "heartbeat_rescue_interval_ms": 30,
    "deadline_rescue_interval_ms": 30,
    "callback_rescue_interval_ms": 30,
    "snapshot_interval_ms": 50,
}


def make_engine(clock: ManualClock | None = None) -> InMemoryEngine:
    return InMemoryEngine(clock=clock or ManualClock(), backoff=NO_JITTER)


def clock_of(engine: InMemoryEngine) -> ManualClock:
    """The manual clock the test engines run on."""
    clock = engine._clock
    assert isinstance(clock, ManualClock)
    return clock


def fast_config(handlers: HandlerRegistry, queues: Any = None, **kwargs: Any) -> RuntimeConfig:
    merged = {**FAST, **kwargs}
    return parse_start_args(queues, handler_queues=handlers.queues(), **merged)


#: The clock of the runtime under test (set by :func:`running`), read by :func:`wait_until`.
_CLOCK: contextvars.ContextVar[ManualClock | None] = contextvars.ContextVar(
    "runtime_test_clock", default=None
)
#: What a hung test is allowed in real time before it fails instead of hanging.
REAL_TIME_GUARD = 20.0


def threads_busy(runtime: Runtime) -> Callable[[], bool]:
    """Whether a handler (or any anyio worker thread) is running: the clock waits."""

    def busy() -> bool:
        executor = runtime._executor
        if executor is not None and executor._limiter.borrowed_tokens > 0:
            return True
        return anyio.to_thread.current_default_thread_limiter().borrowed_tokens > 0

    return busy


@asynccontextmanager
async def running(
    engine: InMemoryEngine,
    handlers: HandlerRegistry,
    config: RuntimeConfig | None = None,
    *,
    shutdown_ms: int = 1000,
    leader: bool = True,
    registry: InMemoryRuntimeRegistry | None = None,
    heartbeat_engine_factory: EngineFactory | None = None,
    descriptors: DescriptorService | None = None,
    clock_waits_for_threads: bool = True,
    control: ControlPlane | None = None,
) -> AsyncIterator[Runtime]:
    """Start a runtime on ``engine``'s manual clock, autojumping, and shut it down after.
    The clock stands still while a handler thread works, unless
    ``clock_waits_for_threads`` is False (a test of a sync handler that overruns).
    ``control``: the control plane of the engine's backend (else one built over it)."""
    clock = clock_of(engine)
    runtime = Runtime(
        engine,
        engine,
        engine.leader_lock() if leader else None,
        clock,
        handlers,
        config or fast_config(handlers),
        runtime_registry=registry,
        heartbeat_engine_factory=heartbeat_engine_factory,
        descriptors=descriptors,
        control=control if control is not None else inmemory_control_plane(engine, engine._clock),
    )
    async with on_clock(clock, runtime if clock_waits_for_threads else None):
        await runtime.start()
        try:
            yield runtime
        finally:
            with clock.move_on_after(10):
                await runtime.shutdown(shutdown_ms)
            assert not runtime.running, "the runtime did not stop in 10 s"


@asynccontextmanager
async def on_clock(clock: ManualClock, runtime: Runtime | None = None) -> AsyncIterator[None]:
    """Run the body in ``clock``'s simulated time (autojump; :func:`wait_until` and
    :func:`sleep` use it), standing still while ``runtime``'s handler threads work."""
    token = _CLOCK.set(clock)
    try:
        with anyio.fail_after(REAL_TIME_GUARD):
            async with clock.autojump(busy=None if runtime is None else threads_busy(runtime)):
                yield
    finally:
        _CLOCK.reset(token)


async def enqueue(
    engine: InMemoryEngine, kind: str, count: int = 1, **spec: Any
) -> list[JobRecord]:
    specs = [JobSpec(kind=kind, args={"n": i}, **spec) for i in range(count)]
    return await engine.enqueue_many(specs)


async def sleep(seconds: float) -> None:
    """Sleep on the runtime's clock inside :func:`running` (a handler that takes its
    time, a pause between steps), else on the host's."""
    clock = _CLOCK.get()
    await (anyio.sleep(seconds) if clock is None else clock.sleep(seconds))


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail the body unless it ends within ``seconds`` of the runtime's clock (inside
    :func:`running` or :func:`on_clock`): :func:`anyio.fail_after` on simulated time."""
    clock = _CLOCK.get()
    assert clock is not None, "within() runs on the runtime's clock: use it inside running()"
    with clock.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise AssertionError(f"not done within {seconds:g} s of the clock")


async def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 3.0, interval: float = 0.005
) -> None:
    """Check ``predicate`` (sync or async) until truthy; fail after ``timeout`` seconds
    of the runtime's clock (inside :func:`running`) or of the host's (outside)."""
    clock = _CLOCK.get()
    now = time.monotonic if clock is None else clock.monotonic
    deadline = now() + timeout
    while True:
        value = predicate()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return
        if now() > deadline:
            raise AssertionError("condition not met in time")
        if clock is None:
            await anyio.sleep(interval)
            continue
        # A handler thread may make it true while the clock stands still: look again
        # after a moment of real time too (this only paces the checks).
        with anyio.move_on_after(0.002):
            await clock.sleep(interval)


async def job(engine: InMemoryEngine, job_id: int) -> JobRecord:
    record = await engine.get_job(job_id)
    assert record is not None
    return record
