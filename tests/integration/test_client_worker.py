"""Workers started through ``AsyncClient.start``: handlers, outcomes, callbacks, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

import awa
from awa import AsyncClient, AwaError, Job, JobState
from tests.support.waits import job_in_state, until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Ping:
    n: int


@dataclasses.dataclass
class Blocking:
    n: int


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


async def test_async_and_sync_handlers_run_end_to_end(client: AsyncClient) -> None:
    seen: list[tuple[str, Any, int]] = []
    threads: list[str] = []
    release = threading.Event()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        assert isinstance(job.args, Ping)
        job.set_progress(50, "half")
        job.update_metadata({"seen": True})
        await job.flush_progress()
        seen.append(("async", job.args.n, job.attempt))

    @client.task(Blocking, queue="blocking")
    def blocking(job: Job[Blocking]) -> None:
        threads.append(threading.current_thread().name)
        # Held until the test, on the event loop, lets it go: a sync handler run on the
        # loop's thread would leave the test no turn to do so.
        assert release.wait(30), "the test never ran while the sync handler worked"
        seen.append(("sync", job.args.n, job.attempt))

    await client.start([("default", 2), ("blocking", 2)], poll_interval_ms=100)
    try:
        a = await client.insert(Ping(1))
        b = await client.insert(Blocking(2), queue="blocking")
        done_a = await job_in_state(client, a.id, JobState.Completed)
        await until(lambda: threads, "the sync handler started")
        release.set()
        done_b = await job_in_state(client, b.id, JobState.Completed)
        assert done_a.state == JobState.Completed and done_b.state == JobState.Completed
        assert done_a.finalized_at is not None
        assert sorted(seen) == [("async", 1, 1), ("sync", 2, 1)]
        assert threads and threads[0] != threading.main_thread().name
        health = await client.health_check()
        assert health.healthy and set(health.queues) == {"default", "blocking"}
        assert health.queues["default"].max_workers == 2
    finally:
        await client.shutdown()


async def test_a_fresh_job_wakes_the_worker_without_waiting_for_its_poll(
    client: AsyncClient,
) -> None:
    picked = asyncio.Event()

    @client.task(Ping)
    async def ping(job: Job[Ping]) -> None:
        picked.set()

    # start() returns once the LISTEN is up; the claim loop polls only every 60 s, so a
    # pickup within the 30 s wait below was woken by the insert's notification.
    await client.start([("default", 2)], poll_interval_ms=60_000)
    try:
        await client.insert(Ping(1))
        await asyncio.wait_for(picked.wait(), timeout=30)
    finally:
        await client.shutdown()


@dataclasses.dataclass
class Other:
    n: int


async def test_one_listening_connection_serves_every_queue_and_cancels(
    client: AsyncClient, migrated_database_url: str
) -> None:
    import psycopg

    picked: list[str] = []
    started = asyncio.Event()
    all_picked = asyncio.Event()

    def pick(what: str) -> None:
        picked.append(what)
        if len(picked) == 3:
            all_picked.set()

    @client.task(Ping, queue="first")
    async def first(job: Job[Ping]) -> None:
        pick("first")

    @client.task(Other, queue="second")
    async def second(job: Job[Other]) -> None:
        pick("second")

    @client.task(Blocking, queue="third")
    async def third(job: Job[Blocking]) -> None:
        started.set()
        while not job.is_cancelled():
            await asyncio.sleep(0.01)  # the handler's own check of its cancel flag
        pick("cancelled")

    # Claim loops poll every 30 s and heartbeat every 60 s: what happens sooner was
    # announced.
    await client.start(
        [("first", 2), ("second", 2), ("third", 2)],
        poll_interval_ms=30_000,
        heartbeat_interval_ms=60_000,
        heartbeat_staleness_ms=180_000,
    )
    try:
        async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
            )
            assert await cur.fetchone() == (1,)
        # start() returned once the LISTEN was up, so nothing below waits for it.
        await client.insert(Ping(1), queue="first")
        await client.insert(Other(2), queue="second")
        blocking = await client.insert(Blocking(3), queue="third")
        await asyncio.wait_for(started.wait(), timeout=30)
        await client.cancel(blocking.id)
        await asyncio.wait_for(all_picked.wait(), timeout=30)
        assert sorted(picked) == ["cancelled", "first", "second"]
    finally:
        await client.shutdown()


async def test_handler_outcomes(client: AsyncClient) -> None:
    @dataclasses.dataclass
    class Outcome:
        what: str

    @client.task(Outcome)
    async def handle(job: Job[Outcome]) -> Any:
        what = job.args.what
        if what == "retry":
            return awa.RetryAfter(60)
        if what == "snooze":
            return awa.Snooze(60)
        if what == "cancel":
            return awa.Cancel("not needed")
        if what == "terminal":
            raise awa.TerminalError("bad input")
        if what == "boom":
            raise RuntimeError("kaput")
        return "anything"

    await client.start([("default", 5)])
    try:
        ids = {w: (await client.insert(Outcome(w))).id for w in ("retry", "snooze", "cancel")}
        ids |= {w: (await client.insert(Outcome(w))).id for w in ("terminal", "boom", "done")}
        unknown = await client.insert({"x": 1}, kind="nobody_handles_this")
        expected = {
            "retry": JobState.Retryable,
            "snooze": JobState.Scheduled,
            "cancel": JobState.Cancelled,
            "terminal": JobState.Failed,
            "boom": JobState.Retryable,
            "done": JobState.Completed,
        }
        for what, state in expected.items():
            assert (await job_in_state(client, ids[what], state)).state == state, what
        boom = await client.get_job(ids["boom"])
        assert "kaput" in boom.errors[0]["error"] and boom.errors[0]["attempt"] == 1
        failed = await job_in_state(client, unknown.id, JobState.Failed)
        assert "unknown job kind: nobody_handles_this" in failed.errors[-1]["error"]
        snoozed = await client.get_job(ids["snooze"])
        assert snoozed.attempt == 0
    finally:
        await client.shutdown()
    result = await client.retry_failed(kind="outcome")
    assert [j.id for j in result.jobs] == [ids["terminal"]] and result.matched == 1


async def test_external_callback_flow(client: AsyncClient) -> None:
    tokens: list[str] = []

    @client.task(Ping)
    async def park(job: Job[Ping]) -> Any:
        token = await job.register_callback(timeout_seconds=60)
        tokens.append(token.id)
        return awa.WaitForCallback(token)

    await client.start()
    try:
        first = await client.insert(Ping(1))
        await job_in_state(client, first.id, JobState.WaitingExternal)
        done = await client.complete_external(tokens[0], {"ok": True})
        assert done.state == JobState.Completed
        second = await client.insert(Ping(2))
        await job_in_state(client, second.id, JobState.WaitingExternal)
        heartbeat = await client.heartbeat_callback(tokens[1], 120)
        assert heartbeat.state == JobState.WaitingExternal
        ignored = await client.resolve_callback(tokens[1])
        # As in awa-pg, an ignored resolution reports no job and leaves it waiting.
        assert ignored.is_ignored() and ignored.job is None
        assert (await client.get_job(second.id)).state == JobState.WaitingExternal
        failed = await client.fail_external(tokens[1], "remote said no")
        assert failed.state == JobState.Failed
        with pytest.raises(awa.CallbackNotFound):
            await client.complete_external(tokens[1])
    finally:
        await client.shutdown()


async def test_dlq_round_trip(client: AsyncClient) -> None:
    @client.task(Ping)
    async def fail(job: Job[Ping]) -> None:
        raise awa.TerminalError("nope")

    await client.start()
    try:
        job = await client.insert(Ping(1), tags=["t"])
        await job_in_state(client, job.id, JobState.Failed)
    finally:
        await client.shutdown()
    entry = await client.move_failed_to_dlq(job.id, "manual review")
    assert entry is not None and entry.job.id == job.id and entry.reason == "manual review"
    assert await client.dlq_depth() == 1
    assert await client.dlq_depth_by_queue() == [("default", 1)]
    listed = await client.list_dlq(tag="t")
    assert [e.job.id for e in listed] == [job.id]
    assert (await client.get_dlq_job(job.id)) is not None
    retried = await client.retry_from_dlq(job.id, queue="elsewhere")
    assert retried is not None and retried.queue == "elsewhere" and retried.attempt == 0
    assert await client.dlq_depth() == 0


async def test_start_validation_and_deprecated_worker(client: AsyncClient) -> None:
    with pytest.raises(AwaError, match="register at least one worker before starting the runtime"):
        await client.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @client.worker(Ping, queue="q")
        async def handler(job: Job[Ping]) -> None:
            return None

    assert [(w.category, str(w.message)) for w in caught] == [
        (DeprecationWarning, "client.worker() is deprecated, use client.task() instead")
    ]
    with pytest.raises(ValueError):
        await client.start([("other", 1)])
    with pytest.raises((ValueError, TypeError)):
        await client.start([{"name": "q", "max_workers": 0}])


async def test_shutdown_lets_running_handlers_finish(client: AsyncClient) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[int] = []

    @client.task(Ping)
    async def slow(job: Job[Ping]) -> None:
        ran.append(job.args.n)
        started.set()
        await release.wait()

    await client.start()
    job = await client.insert(Ping(1))
    await asyncio.wait_for(started.wait(), 30)
    stopping = asyncio.create_task(client.shutdown(timeout_ms=60_000))
    while not (await client.health_check()).shutting_down:
        await asyncio.sleep(0)  # lets the shutdown task begin; no time passes
    assert not stopping.done()  # it waits for the running handler
    release.set()
    await asyncio.wait_for(stopping, 30)
    assert (await client.get_job(job.id)).state == JobState.Completed
    later = await client.insert(Ping(2))
    health = await client.health_check()
    assert not health.poll_loop_alive  # nothing claims any more
    assert (await client.get_job(later.id)).state == JobState.Available
    assert ran == [1]


async def test_shutdown_tells_running_handlers_at_once(client: AsyncClient) -> None:
    started = asyncio.Event()
    noticed: list[bool] = []

    @client.task(Ping)
    async def cooperative(job: Job[Ping]) -> None:
        started.set()
        for _ in range(200):
            if job.is_cancelled():
                noticed.append(True)
                return
            # The handler's own check of its flag, 4 s in all: longer than the drain.
            await asyncio.sleep(0.02)

    await client.start()
    job = await client.insert(Ping(1))
    await asyncio.wait_for(started.wait(), 5)
    await client.shutdown(timeout_ms=3000)
    # The handler saw the flag and returned before the drain timeout cut it off (the loop
    # runs 4 s, so without the early flag the timeout cancels it before it can notice).
    assert len(noticed) == 1
    assert (await client.get_job(job.id)).state == JobState.Completed


async def test_shutdown_timeout_releases_unfinished_attempts(client: AsyncClient) -> None:
    started = asyncio.Event()

    @client.task(Ping)
    async def stuck(job: Job[Ping]) -> None:
        started.set()
        await asyncio.Event().wait()  # until the shutdown timeout cancels it

    await client.start()
    job = await client.insert(Ping(1))
    await asyncio.wait_for(started.wait(), 5)
    began = time.monotonic()
    await client.shutdown(timeout_ms=200)
    assert time.monotonic() - began < 5
    after = await client.get_job(job.id)
    assert after.state in (JobState.Retryable, JobState.Available)


async def test_progress_as_the_handler_sees_it(client: AsyncClient) -> None:
    seen: dict[str, Any] = {}

    @client.task(Ping, queue="progress")
    async def report(job: Job[Ping]) -> None:
        seen["initial"] = job.progress
        job.set_progress(40, "reading")
        seen["after_set"] = job.progress
        job.update_metadata({"cursor": 7})
        seen["after_metadata"] = job.progress
        job.set_progress(150, "clamped")
        seen["over_100"] = job.progress
        for bad in (-1, 256):
            with pytest.raises(OverflowError, match="out of range") as info:
                job.set_progress(bad)
            assert isinstance(info.value, ValueError)
        with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
            job.set_progress(50.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="update_metadata requires a dict"):
            job.update_metadata([1])  # type: ignore[arg-type]
        # On the event loop the blocking flush starts the flush instead of deadlocking.
        job.flush_progress_sync()
        seen["stored_mid_attempt"] = await until(
            lambda: _flushed_progress(client, job.id), "the background flush reached the database"
        )

    await client.start([("progress", 1)], poll_interval_ms=50)
    try:
        queued = await client.insert(Ping(1), queue="progress")
        await job_in_state(client, queued.id, JobState.Completed)
    finally:
        await client.shutdown()
    assert seen["initial"] is None
    assert seen["after_set"] == {"percent": 40, "message": "reading"}
    assert seen["after_metadata"] == {
        "percent": 40,
        "message": "reading",
        "metadata": {"cursor": 7},
    }
    assert seen["over_100"] == {"percent": 100, "message": "clamped", "metadata": {"cursor": 7}}
    assert seen["stored_mid_attempt"]["percent"] == 100


async def _flushed_progress(client: AsyncClient, job_id: int) -> dict[str, Any] | None:
    progress = (await client.get_job(job_id)).progress
    return progress if progress is not None and progress.get("percent") == 100 else None
