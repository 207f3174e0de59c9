"""Outcomes Postgres cannot store are sanitised or refused where the handler hands them
over, and the real error is recorded; the job is never left ``running`` for the rescue.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

import awa
from awa import AsyncClient, Job, JobState
from tests.support.waits import job_in_state

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(60)]


@dataclasses.dataclass
class Case:
    name: str


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


#: Every state but the two a job passes through before its outcome is stored.
SETTLED = [s for s in JobState if s not in (JobState.Available, JobState.Running)]


async def test_unstorable_outcomes_record_the_real_error(client: AsyncClient) -> None:
    @client.task(Case, queue="unstorable")
    async def handler(job: Job[Case]) -> Any:
        name = job.args.name
        if name == "nul_message":
            raise ValueError("bad\x00byte")
        if name == "surrogate_message":
            raise ValueError("half a pair: \ud800")
        if name == "huge_snooze":
            return awa.Snooze(3e11)
        if name == "huge_retry_after":
            return awa.RetryAfter(10**30)
        if name == "nul_progress":
            job.set_progress(10, "a\x00b")
        if name == "nul_metadata":
            job.update_metadata({"note": "a\x00b"})
        if name == "nul_cancel_reason":
            return awa.Cancel("no\x00thanks")
        return None

    names = [
        "nul_message",
        "surrogate_message",
        "huge_snooze",
        "huge_retry_after",
        "nul_progress",
        "nul_metadata",
    ]
    ids = {
        name: (await client.insert(Case(name), queue="unstorable", max_attempts=1)).id
        for name in [*names, "nul_cancel_reason"]
    }
    await client.start([("unstorable", 4)], poll_interval_ms=50)
    try:
        found = {name: await job_in_state(client, job_id, *SETTLED) for name, job_id in ids.items()}
    finally:
        await client.shutdown()

    expected = {
        "nul_message": "ValueError: bad\\x00byte",
        "surrogate_message": "ValueError: half a pair: \\ud800",
        "huge_snooze": "ValidationError: seconds: must be at most",
        "huge_retry_after": "ValidationError: seconds: must be at most",
        "nul_progress": "ValidationError: progress.message: must not contain NUL",
        "nul_metadata": "ValidationError: progress.metadata: must not contain NUL",
    }
    for name in names:
        job = found[name]
        assert job.state == JobState.Failed, (name, job.state)
        assert job.errors[-1]["error"].startswith(expected[name]), (name, job.errors)
    assert found["nul_cancel_reason"].state == JobState.Cancelled
