"""External callbacks end the way awa-pg 0.6.9 ends them: a resume, retry or operator
retry ends the callback (its token stops resolving), ``retry_external`` starts the job
afresh, and ``heartbeat_callback`` refuses timeouts that are not finite and non-negative."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

import awa
from awa import AsyncClient, CallbackNotFound, Job, JobState, ValidationError
from tests.support.waits import job_in_state

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Park:
    mode: str


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


@pytest.mark.parametrize("storage", ["canonical", "queue_storage"])
async def test_callbacks_end_like_awa_pg(client: AsyncClient, storage: str) -> None:
    if storage == "queue_storage":
        await client.install_queue_storage()
    tokens: dict[int, list[str]] = {}
    resumed: list[Any] = []

    @client.task(Park, queue="cb")
    async def handler(job: Job[Park]) -> Any:
        token = await job.register_callback(timeout_seconds=60)
        tokens.setdefault(job.id, []).append(token.id)
        if job.args.mode == "wait":
            resumed.append(await job.wait_for_callback(token))
            return None
        return awa.WaitForCallback(token)

    await client.start([("cb", 4)], poll_interval_ms=50)
    try:
        # resume, then a second resume / heartbeat / complete: the callback has ended.
        waiting = await client.insert(Park("wait"), queue="cb")
        await job_in_state(client, waiting.id, JobState.WaitingExternal)
        token = tokens[waiting.id][0]
        job = await client.resume_external(token, {"a": 1})
        assert job.state == JobState.Running
        for late in (
            client.resume_external(token, {"a": 2}),
            client.heartbeat_callback(token, 30),
            client.complete_external(token, {}),
        ):
            with pytest.raises(CallbackNotFound, match=f"callback not found: {token}"):
                await late
        await job_in_state(client, waiting.id, JobState.Completed)
        assert resumed == [{"a": 1}]

        # retry_external: available again with a fresh attempt budget, no error recorded.
        parked = await client.insert(Park("park"), queue="cb")
        await job_in_state(client, parked.id, JobState.WaitingExternal)
        first = tokens[parked.id][0]
        retried = await client.retry_external(first)
        assert (retried.state, retried.attempt, retried.errors) == (JobState.Available, 0, [])
        with pytest.raises(CallbackNotFound):
            await client.retry_external(first)
        again = await job_in_state(client, parked.id, JobState.WaitingExternal)
        assert again.attempt == 1 and len(tokens[parked.id]) == 2

        # heartbeat timeouts: finite and not negative (0 is allowed).
        second = tokens[parked.id][1]
        for bad in (-1, float("nan"), float("inf")):
            with pytest.raises(ValidationError, match="finite, non-negative number"):
                await client.heartbeat_callback(second, bad)
        with pytest.raises(TypeError, match="real number"):
            await client.heartbeat_callback(second, "x")  # type: ignore[arg-type]
        assert (await client.heartbeat_callback(second, 0)).state == JobState.WaitingExternal

        # An operator retry of a waiting job works, and the old token is then stale.
        operator = await client.retry(parked.id)
        assert operator is not None
        assert (operator.state, operator.attempt) == (JobState.Available, 0)
        with pytest.raises(CallbackNotFound):
            await client.complete_external(second, {})
        await job_in_state(client, parked.id, JobState.WaitingExternal)
        assert len(tokens[parked.id]) == 3
        await client.complete_external(tokens[parked.id][2], {})
        await job_in_state(client, parked.id, JobState.Completed)
    finally:
        await client.shutdown()


@dataclasses.dataclass
class Cel:
    on_complete: str | None = None
    on_fail: str | None = None
    filter: str | None = None
    transform: str | None = None


@pytest.mark.parametrize("storage", ["canonical", "queue_storage"])
async def test_resolve_callback_evaluates_the_registered_cel(
    client: AsyncClient, storage: str
) -> None:
    if storage == "queue_storage":
        await client.install_queue_storage()
    tokens: dict[int, str] = {}
    refused: list[str] = []

    @client.task(Cel, queue="cel")
    async def handler(job: Job[Cel]) -> Any:
        try:
            token = await job.register_callback(timeout_seconds=60, **dataclasses.asdict(job.args))
        except ValidationError as exc:
            refused.append(str(exc))
            return None
        tokens[job.id] = token.id
        return awa.WaitForCallback(token)

    async def parked(args: Cel) -> tuple[int, str]:
        job = await client.insert(args, queue="cel")
        await job_in_state(client, job.id, JobState.WaitingExternal)
        return job.id, tokens[job.id]

    await client.start([("cel", 4)], poll_interval_ms=50)
    try:
        job_id, token = await parked(
            Cel(on_complete='payload.status == "ok"', transform="payload.result")
        )
        ignored = await client.resolve_callback(token, {"status": "pending"})
        assert (ignored.outcome, ignored.job, ignored.reason) == (
            "ignored",
            None,
            "no expressions configured, default is ignore",
        )
        done = await client.resolve_callback(token, {"status": "ok", "result": {"n": 7}})
        assert done.is_completed() and done.payload == {"n": 7}
        assert done.job is not None and done.job.state == JobState.Completed

        job_id, token = await parked(Cel(on_fail="payload.code >= 500", on_complete="true"))
        failed = await client.resolve_callback(token, {"code": 503})
        assert failed.is_failed() and failed.payload is None
        job = await client.get_job(job_id)
        assert job.state == JobState.Failed
        assert job.errors[-1]["error"] == "callback failed: on_fail expression matched"
        assert job.errors[-1]["expression"] == "payload.code >= 500"

        job_id, token = await parked(Cel(filter='payload.kind == "x"', on_complete="true"))
        skipped = await client.resolve_callback(token, {"kind": "y"}, default_action="complete")
        assert skipped.is_ignored() and skipped.reason == "filter expression returned false"
        assert (await client.get_job(job_id)).state == JobState.WaitingExternal

        bad = await client.insert(Cel(on_complete="job.id > 0"), queue="cel")
        await job_in_state(client, bad.id, JobState.Completed)
        assert refused and "only 'payload' is available" in refused[0]
    finally:
        await client.shutdown()
