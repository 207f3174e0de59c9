"""A database this package installs fresh runs on queue storage (ADR 0020), even when jobs
are inserted before the first worker starts: the README's quickstart (migrate, insert,
start) and the usual rollout (`awa migrate`, a web app that enqueues in its own
transactions, then `awa worker`), each with 1,000 jobs that all run exactly once. A worker
says at start which engine it runs on, and on canonical storage why and how to move."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import awa
from awa.bridge import insert_job_sync
from awa.entrypoints.cli import cli

pytestmark = [pytest.mark.postgres]

JOBS = 1000
DRAIN_TIMEOUT = 120.0


@dataclasses.dataclass
class SendEmail:
    to: str
    subject: str


def storage_state(url: str) -> tuple[str, str, int]:
    """(state, active_engine, canonical job count)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT state, active_engine, (SELECT count(*) FROM awa.canonical_jobs)"
            " FROM awa.storage_transition_state"
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), int(row[2])


@pytest.mark.anyio
async def test_the_quickstart_ends_on_queue_storage_and_runs_every_job_once(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = awa.AsyncClient(database_url)
    ran: Counter[int] = Counter()
    all_ran = asyncio.Event()

    @client.task(SendEmail, queue="email")
    async def send_email(job: awa.Job[SendEmail]) -> None:
        ran[job.id] += 1
        if len(ran) >= JOBS:
            all_ran.set()

    caplog.set_level(logging.INFO, logger="awa")
    try:
        await client.migrate()
        # As the quickstart: jobs are inserted before the first start().
        ids = [
            (await client.insert(SendEmail(f"u{i}@example.com", "Welcome"), queue="email")).id
            for i in range(10)
        ]
        async with await client.transaction() as tx:
            bulk = await tx.insert_many(
                [SendEmail(f"u{i}@example.com", "Welcome") for i in range(10, JOBS)],
                queue="email",
            )
        ids += [job.id for job in bulk]
        assert storage_state(database_url) == ("active", "queue_storage", 0)
        await client.start([("email", 5)])
        try:
            await asyncio.wait_for(all_ran.wait(), DRAIN_TIMEOUT)
        finally:
            await client.shutdown()
        status = json.loads(await client.storage_status())
    finally:
        await client.close()
    assert sorted(ran) == sorted(ids) and set(ran.values()) == {1}
    assert status["state"] == "active" and status["active_engine"] == "queue_storage"
    notices = [r for r in caplog.records if r.getMessage().startswith("storage engine:")]
    assert [r.getMessage() for r in notices] == ["storage engine: queue storage (schema awa)"]
    assert notices[0].levelno == logging.INFO


WORKER_MODULE = """
import os

import awa

client = awa.AsyncClient(os.environ["DATABASE_URL"])


@client.task(dict, kind="signup_email")
async def signup_email(job: awa.Job[dict]) -> None:
    async with await client.transaction() as tx:
        await tx.execute("INSERT INTO runs (job_id) VALUES ($1)", job.id)
"""


def _runs(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [int(job_id) for (job_id,) in conn.execute("SELECT job_id FROM runs").fetchall()]


def test_migrate_then_the_web_app_then_the_workers_runs_on_queue_storage(
    database_url: str, tmp_path: Path
) -> None:
    migrated = CliRunner().invoke(cli, ["--database-url", database_url, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    assert "Storage engine: queue storage (schema awa)" in migrated.stdout
    # The web app deploys first and enqueues inside its own transactions.
    ids: list[int] = []
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE signups (email text)")
        conn.execute("CREATE TABLE runs (job_id bigint NOT NULL)")
        conn.commit()
        for batch in range(10):
            with conn.transaction():
                for i in range(batch * 100, (batch + 1) * 100):
                    conn.execute("INSERT INTO signups VALUES (%s)", (f"u{i}@example.com",))
                    row = insert_job_sync(conn, {"email": i}, kind="signup_email")
                    ids.append(int(row["id"]))
    assert storage_state(database_url) == ("active", "queue_storage", 0)
    # Then the workers.
    (tmp_path / "fresh_worker_app.py").write_text(textwrap.dedent(WORKER_MODULE))
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "awa", "worker", "--module", "fresh_worker_app"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while len(_runs(database_url)) < JOBS and worker.poll() is None:
            assert time.monotonic() < deadline, f"{len(_runs(database_url))} of {JOBS} ran"
            time.sleep(0.2)  # polls the database's state, bounded by the deadline
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    runs = _runs(database_url)
    assert sorted(runs) == sorted(ids), stderr[-2000:]
    assert "storage engine: queue storage (schema awa)" in stderr
    assert storage_state(database_url) == ("active", "queue_storage", 0)


@pytest.mark.anyio
async def test_a_worker_on_canonical_storage_says_why_and_how_to_move(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The template is migrated below the client: canonical, as a database of an earlier
    # release; a job inserted before the first start keeps it there.
    client = awa.AsyncClient(migrated_database_url)

    @client.task(dict, kind="old_job")
    async def old_job(job: awa.Job[dict[str, int]]) -> None:
        return None

    caplog.set_level(logging.INFO, logger="awa")
    try:
        await client.insert({"n": 1}, kind="old_job")
        await client.start([("default", 1)])
        await client.shutdown()
    finally:
        await client.close()
    notices = [r for r in caplog.records if r.getMessage().startswith("storage engine:")]
    assert len(notices) == 1 and notices[0].levelno == logging.WARNING
    text = notices[0].getMessage()
    assert text.startswith("storage engine: canonical (deprecated)")
    assert "awa storage prepare --engine queue_storage" in text
    assert "awa storage finalize" in text
    health = await asyncio.to_thread(
        CliRunner().invoke, cli, ["--database-url", migrated_database_url, "health", "--json"]
    )
    report = json.loads(health.stdout)
    assert report["storage"]["engine"] == text
    assert report["storage"]["schema"] is None
