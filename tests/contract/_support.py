"""Small helpers shared by the contract tests; they use only the port and the handle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from awa.domain.job import Claim, JobRecord, JobSpec, QueueCounts
from awa.domain.states import JobState
from awa.ports.storage import Rescued
from tests.support.engines import EngineHandle

QUEUE = "contract"
SECOND = timedelta(seconds=1)


def spec(kind: str = "contract_job", *, queue: str = QUEUE, **fields: Any) -> JobSpec:
    return JobSpec(kind=kind, queue=queue, **fields)


async def enqueue(handle: EngineHandle, kind: str = "contract_job", **fields: Any) -> JobRecord:
    (job,) = await handle.engine.enqueue_many([spec(kind, **fields)])
    return job


async def enqueue_n(handle: EngineHandle, count: int, **fields: Any) -> list[JobRecord]:
    return await handle.engine.enqueue_many(
        [spec(f"job_{index}", **fields) for index in range(count)]
    )


async def claim_one(handle: EngineHandle, queue: str = QUEUE, **options: Any) -> Claim:
    claims = await handle.engine.claim(queue, limit=1, **options)
    assert len(claims) == 1, f"expected one claim, got {claims}"
    return claims[0]


async def claim_ids(handle: EngineHandle, queue: str = QUEUE, limit: int = 100) -> list[int]:
    return [claim.job.id for claim in await handle.engine.claim(queue, limit=limit)]


async def fetch(handle: EngineHandle, job_id: int) -> JobRecord:
    job = await handle.engine.get_job(job_id)
    assert job is not None, f"job {job_id} is missing"
    return job


async def counts_for(handle: EngineHandle, queue: str = QUEUE) -> QueueCounts:
    for counts in await handle.engine.queue_counts():
        if counts.queue == queue:
            return counts
    raise AssertionError(f"no counts for queue {queue!r}")


async def enable_dlq(handle: EngineHandle, queue: str = QUEUE) -> None:
    await handle.engine.set_queue_dlq(queue, enabled=True)


async def failed_job(handle: EngineHandle, **fields: Any) -> JobRecord:
    """A job driven to ``failed`` by a terminal failure of its first attempt."""
    job = await enqueue(handle, **fields)
    claim = await claim_one(handle, fields.get("queue", QUEUE))
    assert claim.job.id == job.id
    await handle.engine.fail(claim.lease, error="boom")
    return await fetch(handle, job.id)


def state_of(job: JobRecord | None) -> JobState | None:
    return None if job is None else job.state


def rescued_as(
    claim: Claim, state: JobState, reason: str, dlq_reason: str | None = None
) -> Rescued:
    """What a rescue sweep reports for ``claim``'s attempt."""
    job = claim.job
    return Rescued(claim.lease, state, reason, dlq_reason, queue=job.queue, kind=job.kind)
