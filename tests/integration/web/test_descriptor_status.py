"""The descriptors' read-time status on the pages: a descriptor live runtimes disagree on
shows the ``drift`` badge with its meaning on the queue list, the queue page and the kinds
page; one no runtime refreshes any more shows ``stale``."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from starlette.testclient import TestClient

import awa
from awa.domain.descriptors import STATUS_MEANINGS
from awa.ports.runtime_registry import RuntimeSnapshot
from tests.integration.web.conftest import AppFactory, Seeded

pytestmark = pytest.mark.postgres


def _snapshot(queue_hash: str, kind_hash: str) -> RuntimeSnapshot:
    now = datetime.now(UTC)
    return RuntimeSnapshot(
        id=str(uuid.uuid4()),
        hostname="host",
        pid=1,
        version="test",
        started_at=now,
        last_seen_at=now,
        leader=False,
        healthy=True,
        postgres_connected=True,
        poll_loop_alive=True,
        heartbeat_alive=True,
        shutting_down=False,
        snapshot_interval_ms=10_000,
        queue_descriptor_hashes={"reports": queue_hash},
        job_kind_descriptor_hashes={"report": kind_hash},
    )


async def _two_versions(url: str) -> None:
    """Store descriptors of queue ``reports`` and kind ``report`` and ``old_kind``, then
    publish two live runtimes that declare different versions of the first two."""
    async with awa.AsyncClient(url) as client:

        @client.task(dict, kind="report", queue="reports")
        async def report(job: awa.Job[dict[str, object]]) -> None:
            return None

        client.queue_descriptor("reports", display_name="Monthly reports")
        client.job_kind_descriptor("report", description="Builds a report")
        client.job_kind_descriptor("old_kind", description="Nobody declares me now")
        await client.start([("reports", 1)])
        await client.shutdown()
        registry = await client.runtime_registry()
        await registry.upsert_runtime(_snapshot("v1", "k1"))
        await registry.upsert_runtime(_snapshot("v2", "k2"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.job_kind_descriptors SET last_seen_at = now() - interval '1 hour' "
            "WHERE kind = 'old_kind'"
        )


@pytest.fixture
def pages(make_client: AppFactory, seeded: Seeded) -> TestClient:
    asyncio.run(_two_versions(seeded.url))
    return make_client(seeded.url)


def _badge(flag: str) -> str:
    return f'<span class="badge warn" title="{STATUS_MEANINGS[flag]}">{flag}</span>'


def test_pages_show_drift_and_stale_badges_with_their_meaning(pages: TestClient) -> None:
    queues = {q["queue"]: q for q in pages.get("/api/queues").json()}
    assert queues["reports"]["descriptor"]["drift"] is True
    assert queues["reports"]["descriptor"]["stale"] is False
    drift = _badge("drift")
    for path in ("/queues", "/queues/reports", "/kinds"):
        html = pages.get(path).text
        assert drift in html, path
        assert STATUS_MEANINGS["drift"] in html, path
    kinds = pages.get("/kinds").text
    assert _badge("stale") in kinds and STATUS_MEANINGS["stale"] in kinds
    # The queue list marks only the queue that drifts.
    row = pages.get("/queues").text.split('data-queue="mail"')[1].split("</tr>")[0]
    assert 'badge warn" title' not in row
