"""Stored results and ``wait_for`` (ADR 0033) on every engine: a task that stores results
leaves its handler's return value for the code waiting on the job, which is woken by a
notification (or polls, behind a pooler) and gets the value, or the job's failure or
cancellation raised; the store keeps a result apart from the job row until it expires."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import anyio
import pytest

from awa.domain import results as result_rules
from awa.domain.errors import JobNotFound, TerminalError, ValidationError
from awa.domain.handler_results import Cancel
from awa.domain.results import MAX_RESULT_BYTES, RESULT_RETENTION, JobCancelled, JobFailed
from awa.domain.states import JobState
from awa.entrypoints.bootstrap import Wiring
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.client_core import ClientCore
from awa.entrypoints.job import Job
from awa.ports.results import ResultStore
from awa.runtime.handlers import HandlerRegistry
from awa.testing import work_next
from tests.contract._support import QUEUE, enqueue, fetch
from tests.contract.conftest import BackendHandle
from tests.support.engines import POOLED, EngineHandle
from tests.support.waits import until

pytestmark = pytest.mark.anyio


@dataclasses.dataclass
class Report:
    rows: int
    name: str


@dataclasses.dataclass
class RowCount:
    rows: int


def client_on(handle: EngineHandle) -> AsyncClient:
    """An ``AsyncClient`` over the engine under test and its backend's control plane."""
    client = AsyncClient.__new__(AsyncClient)
    ClientCore._init_state(client, "postgresql://contract/engine", 1)
    client._policies = handle.policies
    client._wiring_obj = Wiring(
        url="postgresql://contract/engine",
        engine=handle.engine,  # type: ignore[arg-type]
        control=handle.control,
        policies=handle.policies,
    )
    client._schema_checked = True
    client._handlers = HandlerRegistry(handle.policies)
    client._runtime = None
    client._runtime_resources = None
    return client


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter polls once an hour: only a notification wakes it within a test."""
    monkeypatch.setattr(result_rules, "WAIT_POLL_SECONDS", 3600.0)


async def test_a_stored_result_is_what_wait_for_returns(engine: EngineHandle) -> None:
    client = client_on(engine)

    @client.task(dict, kind="reporting", queue=QUEUE, store_result=True)
    async def report(job: Job[dict[str, Any]]) -> Report:
        return Report(rows=job.args["n"] * 2, name="daily")

    job = await enqueue(engine, "reporting", args={"n": 21})
    assert (await work_next(client, QUEUE)).outcome == "completed"
    assert await client.wait_for(job.id) == {"rows": 42, "name": "daily"}
    assert await client.wait_for(job.id, timeout=1, result_type=Report) == Report(42, "daily")

    # The result outlives the job's row until its own retention.
    assert await engine.engine.delete_jobs([job.id]) == 1
    assert await client.wait_for(job.id) == {"rows": 42, "name": "daily"}


async def test_get_result_reads_the_stored_result_without_waiting(engine: EngineHandle) -> None:
    client = client_on(engine)

    @client.task(dict, kind="reporting", queue=QUEUE, store_result=True)
    async def report(job: Job[dict[str, Any]]) -> Report:
        return Report(rows=job.args["n"], name="now")

    job = await enqueue(engine, "reporting", args={"n": 7})
    # Not finished yet: nothing stored, and the read does not wait.
    assert await client.get_result(job.id) is None
    assert (await work_next(client, QUEUE)).outcome == "completed"
    assert await client.get_result(job.id) == {"rows": 7, "name": "now"}
    assert await client.get_result(job.id, result_type=Report) == Report(7, "now")
    # It reads the results alone, so it answers after the job's row is gone.
    assert await engine.engine.delete_jobs([job.id]) == 1
    assert await client.get_result(job.id) == {"rows": 7, "name": "now"}
    with pytest.raises(ValidationError):
        await client.get_result("seven")  # type: ignore[arg-type]


async def test_a_task_that_does_not_store_results_completes_with_none(
    engine: EngineHandle,
) -> None:
    client = client_on(engine)

    @client.task(dict, kind="plain", queue=QUEUE)
    async def plain(job: Job[dict[str, Any]]) -> dict[str, int]:
        return {"ignored": 1}

    job = await enqueue(engine, "plain")
    await work_next(client, QUEUE)
    assert await client.wait_for(job.id) is None
    assert await engine.control.results.get_result(job.id) is None


async def test_a_waiter_is_woken_by_the_finish_notification(
    engine: EngineHandle,
    slow_polls: None,
    request: pytest.FixtureRequest,
) -> None:
    client = client_on(engine)

    @client.task(dict, kind="reporting", queue=QUEUE, store_result=True)
    def report(job: Job[dict[str, Any]]) -> list[int]:
        return [1, 2, 3]

    job = await enqueue(engine, "reporting")
    subscription = await engine.control.results.subscribe_finished(job.id)
    pooled = any(name in request.node.name for name in POOLED)
    assert (subscription is None) == pooled
    if subscription is not None:
        await subscription.close()
    first_read = anyio.Event()
    answer = client._answer

    async def observed(job_id: int, results: ResultStore) -> Any:
        try:
            return await answer(job_id, results)
        finally:
            first_read.set()

    client._answer = observed  # type: ignore[method-assign]
    got: list[Any] = []

    async def wait() -> None:
        got.append(await client.wait_for(job.id))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await first_read.wait()  # the waiter saw the job unfinished and sleeps
            assert (await work_next(client, QUEUE)).outcome == "completed"
            if pooled:
                # No LISTEN through a transaction-mode pooler: the waiter's next poll,
                # on the store's clock, reads the job finished.
                await engine.clock.elapse(result_rules.WAIT_POLL_SECONDS)
    assert got == [[1, 2, 3]]


async def test_a_failure_and_a_cancellation_are_raised_to_the_waiter(
    engine: EngineHandle,
) -> None:
    client = client_on(engine)

    @client.task(dict, kind="broken", queue=QUEUE, store_result=True)
    async def broken(job: Job[dict[str, Any]]) -> None:
        raise TerminalError("the report's source is gone")

    @client.task(dict, kind="dropped", queue=QUEUE, store_result=True)
    async def dropped(job: Job[dict[str, Any]]) -> Cancel:
        return Cancel("nothing to report")

    failing = await enqueue(engine, "broken")
    await work_next(client, QUEUE)
    with pytest.raises(JobFailed, match="the report's source is gone") as failed:
        await client.wait_for(failing.id)
    assert failed.value.job_id == failing.id

    cancelled = await enqueue(engine, "dropped")
    await work_next(client, QUEUE)
    # A cancel records no error entry (as in awa-pg), so the reason is not kept.
    with pytest.raises(JobCancelled, match=f"job {cancelled.id} cancelled"):
        await client.wait_for(cancelled.id)


async def test_a_result_over_the_cap_fails_the_job_saying_so(engine: EngineHandle) -> None:
    client = client_on(engine)

    @client.task(dict, kind="huge", queue=QUEUE, store_result=True)
    async def huge(job: Job[dict[str, Any]]) -> str:
        return "x" * MAX_RESULT_BYTES

    @client.task(dict, kind="opaque", queue=QUEUE, store_result=True)
    async def opaque(job: Job[dict[str, Any]]) -> object:
        return object()

    job = await enqueue(engine, "huge")
    await work_next(client, QUEUE)
    record = await fetch(engine, job.id)
    assert record.state is JobState.Failed
    limit = f"{MAX_RESULT_BYTES + 2} bytes of JSON, over the limit of {MAX_RESULT_BYTES} bytes"
    assert limit in str(record.errors[-1]["error"])
    assert await engine.control.results.get_result(job.id) is None
    with pytest.raises(JobFailed, match="over the limit"):
        await client.wait_for(job.id)

    job = await enqueue(engine, "opaque")
    await work_next(client, QUEUE)
    assert "result" in str((await fetch(engine, job.id)).errors[-1]["error"])


async def test_wait_for_refuses_an_unknown_job_and_times_out(engine: EngineHandle) -> None:
    client = client_on(engine)
    with pytest.raises(JobNotFound):
        await client.wait_for(987_654_321)
    job = await enqueue(engine, "never_run")
    with pytest.raises(TimeoutError, match=f"job {job.id} did not finish within 0.0 s"):
        await client.wait_for(job.id, timeout=0)
    for bad in (-1, float("nan"), "soon"):
        with pytest.raises(ValidationError, match="timeout"):
            await client.wait_for(job.id, timeout=bad)  # type: ignore[arg-type]


async def test_results_are_stored_replaced_expired_and_pruned(backend: BackendHandle) -> None:
    store = backend.control.results
    now = backend.clock.now()
    await store.store_result(7, '{"a": 1}')
    await store.store_result(7, '{"a": 2}')
    stored = await store.get_result(7)
    assert stored is not None
    assert (stored.value, stored.stored_at, stored.expires_at) == (
        {"a": 2},
        now,
        now + RESULT_RETENTION,
    )
    assert await store.get_result(9) is None

    backend.clock.advance(timedelta(days=1))
    await store.store_result(8, "[1]")
    assert await store.prune_results(before=backend.clock.now()) == 0
    backend.clock.advance(RESULT_RETENTION - timedelta(days=1, seconds=-1))
    assert await store.get_result(7) is None  # expired, not yet pruned
    assert (await store.get_result(8)) is not None
    assert await store.prune_results(before=backend.clock.now()) == 1
    assert (await store.get_result(8)) is not None


async def test_a_child_handler_reads_its_parents_results(engine: EngineHandle) -> None:
    from awa.domain.job import JobSpec

    client = client_on(engine)
    seen: list[dict[int, Any]] = []

    @client.task(dict, kind="reporting", queue=QUEUE, store_result=True)
    async def report(job: Job[dict[str, Any]]) -> Report:
        return Report(rows=job.args["n"], name="typed")

    @client.task(dict, kind="plain", queue=QUEUE, store_result=True)
    async def plain(job: Job[dict[str, Any]]) -> list[int]:
        return [job.args["n"]]

    @client.task(dict, kind="merge", queue=QUEUE)
    async def merge(job: Job[dict[str, Any]]) -> None:
        seen.append(job.parent_results)

    typed = await enqueue(engine, "reporting", args={"n": 1})
    untyped = await enqueue(engine, "plain", args={"n": 2})
    (child,) = await engine.engine.enqueue_many(
        [JobSpec("merge", queue=QUEUE, depends_on=(typed.id, untyped.id))]
    )
    for _ in range(3):
        assert (await work_next(client, QUEUE)).outcome == "completed"
    assert seen == [{typed.id: Report(1, "typed"), untyped.id: [2]}]
    stored = await engine.control.results.get_result(typed.id)
    assert stored is not None and stored.kind == "reporting"
    assert (await fetch(engine, child.id)).metadata["awa:parents"] == [typed.id, untyped.id]


async def test_an_announcement_says_whether_the_completion_is_committed(
    backend: BackendHandle,
) -> None:
    store = backend.control.results
    subscription = await store.subscribe_finished(41)
    assert subscription is not None
    try:
        await store.announce_finished(41)
        with anyio.fail_after(10):
            assert await subscription.wait(10) == {result_rules.result_channel(41)}
        await store.announce_finished(40, completed=True)  # another job's: not delivered
        await store.announce_finished(41, completed=True)
        with anyio.fail_after(10):
            assert await subscription.wait(10) == {
                result_rules.result_channel(41),
                result_rules.completed_channel(41),
            }
    finally:
        await subscription.close()


async def test_a_waiter_told_of_the_completion_reads_only_the_result(
    engine: EngineHandle, slow_polls: None, request: pytest.FixtureRequest
) -> None:
    if any(name in request.node.name for name in POOLED):
        pytest.skip("no notifications through a transaction-mode pooler: the waiter polls")
    client = client_on(engine)

    @client.task(dict, kind="reporting", queue=QUEUE, store_result=True)
    def report(job: Job[dict[str, Any]]) -> dict[str, int]:
        return {"rows": 3}

    job = await enqueue(engine, "reporting")
    reads: list[int] = []
    first_read = anyio.Event()
    answer = client._answer

    async def observed(job_id: int, results: ResultStore) -> Any:
        try:
            return await answer(job_id, results)
        finally:
            reads.append(job_id)
            first_read.set()

    client._answer = observed  # type: ignore[method-assign]
    got: list[Any] = []

    async def wait() -> None:
        got.append(await client.wait_for(job.id, result_type=RowCount))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await first_read.wait()
            assert (await work_next(client, QUEUE)).outcome == "completed"
    # One read of the job (unfinished) before the announcement, none after it.
    assert reads == [job.id]
    assert got == [RowCount(rows=3)]


async def test_wait_for_measures_its_timeout_on_the_stores_clock(engine: EngineHandle) -> None:
    client = client_on(engine)
    job = await enqueue(engine, "never_run")
    clock = engine.clock
    armed = clock.pending
    timed_out: list[TimeoutError] = []

    async def wait() -> None:
        try:
            await client.wait_for(job.id, timeout=30)
        except TimeoutError as exc:
            timed_out.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await until(lambda: clock.pending > armed, "the waiter waits on the manual clock")
        await clock.elapse(29)
        assert timed_out == []
        await clock.elapse(1)
        await until(lambda: timed_out, "the waiter timed out at 30 s of the clock")
    assert str(timed_out[0]) == f"job {job.id} did not finish within 30.0 s"
