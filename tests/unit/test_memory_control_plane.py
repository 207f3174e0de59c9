"""The in-memory client has a control plane of its own, built once with its engine: the
operator reads that need the runtime registry or the descriptor catalogs answer without
a database, and every call reaches the same stores."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awa.ports.runtime_registry import RuntimeSnapshot
from awa.testing import memory_client

pytestmark = pytest.mark.anyio


def _snapshot(now: datetime) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        id="00000000-0000-4000-8000-000000000001",
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
        shutting_down=False,
        snapshot_interval_ms=600_000,
        queue_descriptor_hashes={"mail": "h1"},
    )


async def test_the_registry_is_one_store_per_client() -> None:
    client = memory_client()
    first = await client.runtime_registry()
    assert await client.runtime_registry() is first
    assert (await client.admin_control_plane()).registry is first
    await first.upsert_runtime(_snapshot(datetime.now(UTC)))
    (runtime,) = await (await client.runtime_registry()).list_runtimes()
    assert runtime.queue_descriptor_hashes == {"mail": "h1"}


async def test_descriptor_catalogs_are_read_without_a_database() -> None:
    client = memory_client()
    assert await client.list_queue_descriptors() == []
    assert await client.list_job_kind_descriptors() == []
