"""``get_job``/``list_jobs`` say why an available job is not being claimed
(``job.held_back``, ADR 0029): the limit in force is an operator's override or the one
the live workers publish in their snapshots."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import awa
from awa.domain.held_back import MAX_RUNNING_PER_KEY
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot
from awa.testing import memory_client

pytestmark = pytest.mark.anyio


def _worker(queue: QueueSnapshot, *, shutting_down: bool = False) -> RuntimeSnapshot:
    now = datetime.now(UTC)
    return RuntimeSnapshot(
        id="00000000-0000-4000-8000-000000000002",
        hostname="host",
        pid=1,
        version="test",
        started_at=now,
        last_seen_at=now,
        leader=False,
        healthy=True,
        postgres_connected=False,
        poll_loop_alive=True,
        heartbeat_alive=True,
        shutting_down=shutting_down,
        snapshot_interval_ms=600_000,
        queues=(queue,),
    )


async def test_a_job_of_a_full_key_says_so_on_get_and_list() -> None:
    client = memory_client()
    first = await client.insert({"n": 1}, kind="call_api", queue="api", concurrency_key="t-42")
    second = await client.insert({"n": 2}, kind="call_api", queue="api", concurrency_key="t-42")
    assert (await client.get_job(second.id)).held_back is None

    engine = await client.admin_engine()
    (claim,) = await engine.claim("api", limit=1, max_running_per_key=1)
    assert claim.job.id == first.id
    # A worker claims with the limit but no override says so: the worker's snapshot does.
    assert (await client.get_job(second.id)).held_back is None
    await (await client.runtime_registry()).upsert_runtime(
        _worker(
            QueueSnapshot(
                name="api",
                in_flight=1,
                max_workers=4,
                min_workers=None,
                weight=None,
                max_running_per_key=1,
            )
        )
    )
    expected = awa.HeldBack(MAX_RUNNING_PER_KEY, key="t-42", running=1, max_running=1)
    assert (await client.get_job(second.id)).held_back == expected
    listed = {job.id: job.held_back for job in await client.list_jobs(queue="api")}
    assert listed == {first.id: None, second.id: expected}

    # An override in force wins over the workers' limit.
    await client.set_queue_overrides("api", max_running_per_key=2)
    assert (await client.get_job(second.id)).held_back is None


async def test_a_worker_shutting_down_sets_no_limit_in_force() -> None:
    """The limits in force are the live workers' (``awa.domain.runtimes.is_live``): a
    worker that announced its shutdown claims nothing more, so its limit holds nothing
    back, as SQL ``awa.runtime_is_live`` has it."""
    client = memory_client()
    await client.insert({"n": 1}, kind="call_api", queue="api", concurrency_key="t-7")
    second = await client.insert({"n": 2}, kind="call_api", queue="api", concurrency_key="t-7")
    engine = await client.admin_engine()
    await engine.claim("api", limit=1, max_running_per_key=1)
    queue = QueueSnapshot(
        name="api",
        in_flight=1,
        max_workers=4,
        min_workers=None,
        weight=None,
        max_running_per_key=1,
    )
    registry = await client.runtime_registry()
    await registry.upsert_runtime(_worker(queue, shutting_down=True))
    assert (await client.get_job(second.id)).held_back is None
    await registry.upsert_runtime(_worker(queue))
    assert (await client.get_job(second.id)).held_back is not None
