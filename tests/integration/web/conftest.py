"""Fixtures of the admin web tests: a migrated database with jobs in every state, and the
app under Starlette's TestClient (a real Postgres behind it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import psycopg
import pytest
from starlette.testclient import TestClient

import awa
from awa.domain.admin_views import QueueSample
from awa.domain.states import JobState
from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot

pytestmark = pytest.mark.postgres


@attrs.frozen
class Seeded:
    url: str
    ids: dict[str, list[int]]


def set_state(url: str, state: str, ids: list[int]) -> None:
    finalized = state in ("completed", "failed", "cancelled")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.canonical_jobs SET state = %s::awa.job_state, attempt = 1, "
            "finalized_at = CASE WHEN %s THEN now() ELSE NULL END, "
            "errors = CASE WHEN %s = 'failed' "
            "  THEN ARRAY[jsonb_build_object('error', 'boom', 'attempt', 1, 'at', now())] "
            "  ELSE errors END "
            "WHERE id = ANY(%s)",
            (state, finalized, state, ids),
        )


def seed(url: str) -> Seeded:
    """Jobs in queues ``mail`` and ``reports``: 3 available, 2 running, 2 completed,
    2 failed, 1 cancelled, 1 scheduled; plus one failed job moved into the DLQ."""
    ids: dict[str, list[int]] = {}
    with awa.Client(url) as client:

        def add(n: int, **kw: Any) -> list[int]:
            return [client.insert({"n": i}, **kw).id for i in range(n)]

        ids["available"] = add(3, kind="send_email", queue="mail", tags=["vip"])
        ids["running"] = add(2, kind="send_email", queue="mail")
        ids["completed"] = add(2, kind="report", queue="reports")
        ids["failed"] = add(2, kind="report", queue="reports", tags=["nightly"])
        ids["cancelled"] = add(1, kind="send_email", queue="mail")
        ids["scheduled"] = add(1, kind="report", queue="reports", run_at="2099-01-01T00:00:00Z")
        dlq = add(1, kind="send_email", queue="mail")
        for state in ("running", "completed", "failed", "cancelled"):
            set_state(url, state, ids[state])
        set_state(url, "failed", dlq)
        assert client.move_failed_to_dlq(dlq[0], "manual") is not None
        ids["dlq"] = dlq
    return Seeded(url, ids)


#: Minutes ago at which :func:`seed_history` finishes jobs, and how many per queue.
HISTORY = [(m, {"mail": 1 + m * 7 % 4, "reports": m * 5 % 3}) for m in range(2, 59, 4)]
#: Minutes ago at which :func:`seed_history` fails one job, and its queue.
HISTORY_FAILED = [(12, "reports"), (27, "reports"), (44, "mail")]


def finish_at(url: str, state: str, ids: list[int], minutes_ago: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.canonical_jobs SET state = %s::awa.job_state, attempt = 1, "
            "finalized_at = now() - make_interval(mins => %s), "
            "errors = CASE WHEN %s = 'failed' "
            "  THEN ARRAY[jsonb_build_object('error', 'timed out', 'attempt', 1, 'at', now())] "
            "  ELSE errors END "
            "WHERE id = ANY(%s)",
            (state, minutes_ago, state, ids),
        )


def seed_history(url: str) -> dict[str, list[int]]:
    """Jobs finished over the last hour, for the dashboard's charts: completed ones per
    :data:`HISTORY` and failed ones per :data:`HISTORY_FAILED`."""
    done: list[int] = []
    failed: list[int] = []
    with awa.Client(url) as client:
        for minutes_ago, per_queue in HISTORY:
            for queue, n in per_queue.items():
                ids = [client.insert({"n": i}, kind="sync", queue=queue).id for i in range(n)]
                finish_at(url, "completed", ids, minutes_ago)
                done += ids
        for minutes_ago, queue in HISTORY_FAILED:
            job = client.insert({"n": 0}, kind="sync", queue=queue, tags=["nightly"])
            finish_at(url, "failed", [job.id], minutes_ago)
            failed.append(job.id)
    return {"history_completed": done, "history_failed": failed}


#: Depth and lag samples :func:`seed_everything` records: (minutes ago, queue, available
#: jobs, lag in seconds); none between 20 and 24 minutes ago (the leader was away).
SAMPLES = [
    (m, queue, n, lag)
    for m in range(59, -1, -1)
    if not 20 <= m <= 24
    for queue, n, lag in (
        ("mail", 40 - abs(30 - m), float(abs(30 - m) % 7)),
        ("reports", m % 5, 0.5 * (m % 3)),
    )
]


#: The worker runtime that :func:`seed_everything` registers.
RUNTIME_ID = str(uuid.UUID(int=0xA3A))


def seed_everything(url: str) -> Seeded:
    """:func:`seed`, plus what the remaining pages show: a live leader runtime serving
    both queues, two cron schedules (one paused) and a pending batch operation."""
    seeded = seed(url)
    seeded.ids.update(seed_history(url))
    now = datetime.now(UTC)

    async def publish() -> None:
        async with awa.AsyncClient(url) as client:
            registry = await client.runtime_registry()
            await registry.upsert_runtime(
                RuntimeSnapshot(
                    id=RUNTIME_ID,
                    hostname="worker-1",
                    pid=4242,
                    version=awa.__version__,
                    started_at=now - timedelta(hours=2),
                    last_seen_at=now,
                    leader=True,
                    healthy=True,
                    postgres_connected=True,
                    poll_loop_alive=True,
                    heartbeat_alive=True,
                    shutting_down=False,
                    # Live for the whole test however slow the host is.
                    snapshot_interval_ms=600_000,
                    queues=(
                        QueueSnapshot("mail", 2, 10, None, None, (5.0, 10)),
                        QueueSnapshot("reports", 0, 4, 1, 2),
                    ),
                )
            )
            control = await client.admin_control_plane()
            await control.queue_samples.record_queue_samples(
                [
                    QueueSample(
                        now - timedelta(minutes=m), q, {JobState.Available: n}, lag_seconds=lag
                    )
                    for m, q, n, lag in SAMPLES
                ]
            )
            await client.submit_batch_operation(
                "set_priority", spec={"priority": 1}, filter={"queue": "mail"}
            )

    # Seeding may run beside a running event loop (Playwright's), so on its own thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: asyncio.run(publish())).result()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, kind, queue, last_enqueued_at) "
            "VALUES ('nightly_report', '0 3 * * *', 'report', 'reports', now() - interval '1 day')"
        )
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, kind, queue, paused_at) "
            "VALUES ('digest', '*/15 * * * *', 'send_email', 'mail', now())"
        )
    return seeded


@pytest.fixture
def seeded(migrated_database_url: str) -> Seeded:
    return seed(migrated_database_url)


AppFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(migrated_database_url: str) -> Iterator[AppFactory]:
    opened: list[TestClient] = []

    def make(url: str | None = None, **settings: Any) -> TestClient:
        settings.setdefault("cache_ttl", 0.0)
        config = ServerConfig(database_url=url or migrated_database_url, **settings)
        client = TestClient(create_app(config), base_url="http://127.0.0.1:3000")
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def api(make_client: AppFactory, seeded: Seeded) -> TestClient:
    return make_client(seeded.url)
