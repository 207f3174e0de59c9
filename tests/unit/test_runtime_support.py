"""Helpers shared by the runtime tests (no tests here)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.adapters.inmemory.runtime_registry import InMemoryRuntimeRegistry
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import NO_JITTER
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


def fast_config(handlers: HandlerRegistry, queues: Any = None, **kwargs: Any) -> RuntimeConfig:
    merged = {**FAST, **kwargs}
    return parse_start_args(queues, handler_queues=handlers.queues(), **merged)


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
) -> AsyncIterator[Runtime]:
    runtime = Runtime(
        engine,
        engine,
        engine.leader_lock() if leader else None,
        engine._clock,
        handlers,
        config or fast_config(handlers),
        runtime_registry=registry,
        heartbeat_engine_factory=heartbeat_engine_factory,
        descriptors=descriptors,
    )
    await runtime.start()
    try:
        yield runtime
    finally:
        with anyio.fail_after(10):
            await runtime.shutdown(shutdown_ms)


async def enqueue(
    engine: InMemoryEngine, kind: str, count: int = 1, **spec: Any
) -> list[JobRecord]:
    specs = [JobSpec(kind=kind, args={"n": i}, **spec) for i in range(count)]
    return await engine.enqueue_many(specs)


async def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 3.0, interval: float = 0.005
) -> None:
    """Poll ``predicate`` (sync or async) until truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await anyio.sleep(interval)


async def job(engine: InMemoryEngine, job_id: int) -> JobRecord:
    record = await engine.get_job(job_id)
    assert record is not None
    return record
