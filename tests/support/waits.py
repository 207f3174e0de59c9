"""Waiting on a condition in tests that run against a real server and the host's clock.

A test waits for what it needs to be true (a job's state, a row, a flag) and fails
naming it when it is not true in time; it never sleeps a fixed time and then asserts.
The tests of the runtime on the in-memory engine wait on the manual clock instead
(``tests/unit/test_runtime_support.py``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from awa import AsyncClient, Job
from awa.domain.states import JobState

T = TypeVar("T")

#: How long a condition may take on a busy shared host before the test fails.
TIMEOUT = 30.0
#: How often the condition is checked (this paces the checks; nothing waits on it).
INTERVAL = 0.02


async def until(
    check: Callable[[], Any],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> Any:
    """Check ``check()`` (sync or async) until it returns something truthy, and return
    that; fail naming ``what`` and the last value seen after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout:g} s (last seen: {value!r})")
        await anyio.sleep(interval)


def until_sync(
    check: Callable[[], T], what: str, *, timeout: float = TIMEOUT, interval: float = INTERVAL
) -> T:
    """:func:`until` for code outside an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout:g} s (last seen: {value!r})")
        time.sleep(interval)


async def job_in_state(
    client: AsyncClient, job_id: int, *states: JobState, timeout: float = TIMEOUT
) -> Job[Any]:
    """The job once it is in one of ``states`` (read through ``client``)."""

    async def reached() -> Job[Any] | None:
        job = await client.get_job(job_id)
        return job if job.state in states else None

    wanted = " or ".join(str(state) for state in states)
    job: Job[Any] = await until(reached, f"job {job_id} {wanted}", timeout=timeout)
    return job
