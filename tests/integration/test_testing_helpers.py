"""``awa.testing``: the pytest plugin's fixtures, running the application's registered
handlers with a real ``Job``, draining queues, enqueue assertions and throw-away
databases that never touch the application's own database."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
import awa.testing
from awa.adapters._pg import databases as pg_databases_module
from awa.entrypoints import bootstrap
from awa.testing import AwaTestClient, JobRow, NoJob, _database
from awa.testing._database import create_database, drop_database, temporary_database
from tests.support.pg import DatabaseFactory, database_exists
from tests.support.waits import until

pytestmark = [pytest.mark.anyio]


@dataclasses.dataclass
class Charge:
    amount: int


@dataclasses.dataclass
class Email:
    to: str


@pytest.fixture(autouse=True)
def _test_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the plugin's throw-away databases at the suite's Postgres server."""
    if request.node.get_closest_marker("postgres") is not None:
        monkeypatch.setenv("AWA_TEST_DATABASE_URL", request.getfixturevalue("pg_server_url"))


@pytest.fixture
def app_database(
    pg_server_url: str, pg_databases: DatabaseFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The application's own database, as named by DATABASE_URL, holding one job."""
    url = pg_databases.create()
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("AWA_TEST_DATABASE_URL", pg_server_url)
    with awa.Client(url) as client:
        client.migrate()
        client.insert({"keep": True}, kind="app_job")
    try:
        yield url
    finally:
        pg_databases.release(url)


def app_jobs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs").fetchone()
    return int(row[0]) if row else 0


def create_app_client(url: str, seen: list[Any]) -> awa.AsyncClient:
    """How an application builds its client, handlers hidden inside."""
    client = awa.AsyncClient(url)

    @client.task(Email, queue="email")
    async def send(job: awa.Job[Email]) -> Any:
        job.set_progress(50, "rendering")
        job.update_metadata({"template": "welcome"})
        await job.flush_progress()
        if job.args.to == "ada@example.com":
            seen.append(("progress", (await client.get_job(job.id)).progress))
        seen.append(("async", job.args, job.attempt))
        if job.args.to == "later@example.com":
            return awa.RetryAfter(60)
        if job.args.to == "callback@example.com":
            token = await job.register_callback(timeout_seconds=60)
            seen.append(("token", token.id))
            return awa.WaitForCallback(token)
        if job.args.to == "chain@example.com":
            await client.insert(Email("next@example.com"), queue="email")
        return None

    @client.task(Charge, queue="billing")
    def charge(job: awa.Job[Charge]) -> None:  # a plain def handler, run on a thread
        seen.append(("sync", job.args.amount))
        if job.args.amount < 0:
            raise awa.TerminalError("negative amount")

    return client


@pytest.mark.postgres
async def test_fixtures_use_a_throw_away_database(
    app_database: str, awa_database_url: str, awa_client: AwaTestClient
) -> None:
    assert str(psycopg.conninfo.conninfo_to_dict(awa_database_url)["dbname"]).startswith(
        "awa_throwaway_"
    )
    await awa_client.insert(Charge(1))
    await awa_client.clean()
    assert await awa_client.client.list_jobs() == []
    assert app_jobs(app_database) == 1


@pytest.mark.postgres
async def test_temporary_databases_are_dropped_and_only_they_can_be(
    app_database: str, pg_server_url: str
) -> None:
    async with temporary_database() as url:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        assert database_exists(pg_server_url, str(name))
        async with awa.AsyncClient(url) as client:
            assert await client.list_jobs() == []
        left_open = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        # its sessions end on leaving the block; the drop itself goes on in the background
        with pytest.raises(psycopg.OperationalError):
            await left_open.execute("SELECT 1")
    finally:
        await left_open.close()
    # sent to the server (the next test shows the server finishing it)
    assert pg_databases_module._background.wait_sent(timeout=60)
    with pytest.raises(ValueError, match="not a database the test helpers created"):
        await drop_database(app_database)
    assert app_jobs(app_database) == 1


@pytest.mark.postgres
async def test_clean_empties_any_database_it_is_handed(app_database: str) -> None:
    """awa-pg's programs build the helper on their own database in their own fixtures."""
    async with awa.AsyncClient(app_database) as client:
        await client.insert(Charge(2), queue="billing")
        assert app_jobs(app_database) == 2
        await AwaTestClient(client).clean()
        assert app_jobs(app_database) == 0
        assert await client.list_jobs() == []


@pytest.mark.postgres
async def test_the_apps_handlers_run_with_a_real_job(awa_database_url: str) -> None:
    seen: list[Any] = []
    app = create_app_client(awa_database_url, seen)
    try:
        sent = await app.insert(Email("ada@example.com"), queue="email")
        await awa.testing.assert_enqueued(app, Email, args={"to": "ada@example.com"})
        result = await awa.testing.work_next(app, "email")
        assert result.is_completed() and isinstance(result.job, JobRow)
        (_, progress), ran = seen
        assert ran == ("async", Email("ada@example.com"), 1)
        assert progress["percent"] == 50 and progress["message"] == "rendering"
        assert progress["metadata"]["template"] == "welcome"
        assert (await app.get_job(sent.id)).state == awa.JobState.Completed

        await app.insert(Email("later@example.com"), queue="email")
        assert (await awa.testing.work_next(app, "email")).is_retryable()
        await app.insert(Email("callback@example.com"), queue="email")
        waiting = await awa.testing.work_next(app, "email")
        assert waiting.is_waiting_external()
        token = next(t for t in seen if t[0] == "token")[1]
        await app.complete_external(token, {"ok": True})

        await app.insert(Charge(5), queue="billing")
        await app.insert(Charge(-1), queue="billing")
        charged = await awa.testing.drain(app, "billing")
        assert [r.outcome for r in charged] == ["completed", "failed"]
        assert charged[1].error is not None and "negative amount" in charged[1].error
        assert ("sync", 5) in seen
    finally:
        await app.close()


@pytest.mark.postgres
async def test_drain_works_follow_up_jobs_until_the_queue_is_empty(awa_database_url: str) -> None:
    seen: list[Any] = []
    app = create_app_client(awa_database_url, seen)
    try:
        await app.insert(Email("chain@example.com"), queue="email")
        results = await awa.testing.drain(app, "email")
        assert [r.outcome for r in results] == ["completed", "completed"]
        assert [s[1].to for s in seen] == ["chain@example.com", "next@example.com"]
        assert (await awa.testing.work_next(app, "email")).is_no_job()
        await awa.testing.assert_enqueued(app, Email, count=2, state="completed")
    finally:
        await app.close()


@pytest.mark.postgres
async def test_assert_enqueued_explains_a_miss(awa_client: AwaTestClient) -> None:
    await awa_client.insert(Email("ada@example.com"), queue="email", priority=1)
    found = await awa_client.assert_enqueued(Email, args=Email("ada@example.com"), priority=1)
    assert len(found) == 1
    with pytest.raises(AssertionError) as missed:
        await awa_client.assert_enqueued(Email, args={"to": "bob@example.com"})
    assert "expected a job of kind 'email'" in str(missed.value)
    assert "ada@example.com" in str(missed.value)
    with pytest.raises(AssertionError, match="found 1"):
        await awa_client.assert_enqueued("email", count=2)
    with pytest.raises(AssertionError, match="expected no jobs"):
        await awa.testing.assert_nothing_enqueued(awa_client.client)
    await awa.testing.assert_nothing_enqueued(awa_client.client, queue="billing")


@pytest.mark.postgres
async def test_work_one_runs_a_given_handler_with_a_real_job(awa_client: AwaTestClient) -> None:
    async def handler(job: awa.Job[Charge]) -> Any:
        assert isinstance(job.args, Charge)
        job.set_progress(10)  # a stand-in job used to raise AttributeError here
        if job.args.amount == 1:
            return None
        if job.args.amount == 2:
            return awa.RetryAfter(30)
        if job.args.amount == 3:
            return awa.Snooze(30)
        if job.args.amount == 4:
            return awa.Cancel("refunded")
        if job.args.amount == 5:
            raise awa.TerminalError("card declined")
        raise RuntimeError("network")

    empty = await awa_client.work_one(Charge, handler)
    assert empty.is_no_job() and empty.job is NoJob and repr(NoJob) == "NoJob"
    expected = {
        1: "is_completed",
        2: "is_retryable",
        3: "is_snoozed",
        4: "is_cancelled",
        5: "is_failed",
        6: "is_retryable",
    }
    for amount, check in expected.items():
        inserted = await awa_client.insert(Charge(amount))
        result = await awa_client.work_one(Charge, handler)
        assert getattr(result, check)(), (amount, result)
        assert isinstance(result.job, JobRow) and result.job.id == inserted.id
    last = await awa_client.client.get_job(inserted.id)
    assert last.state == awa.JobState.Retryable and "network" in last.errors[-1]["error"]

    def plain(job: awa.Job[Charge]) -> None:
        job.set_progress(100, "done")

    await awa_client.insert(Charge(7))
    assert (await awa_client.work_one(Charge, plain)).is_completed()


@pytest.mark.postgres
async def test_work_one_ignores_other_kinds(awa_client: AwaTestClient) -> None:
    other = await awa_client.insert({"x": 1}, kind="something_else")

    async def handler(job: awa.Job[Charge]) -> None:
        raise AssertionError("must not run")

    assert (await awa_client.work_one(Charge, handler)).is_no_job()
    assert (await awa_client.client.get_job(other.id)).state == awa.JobState.Available


async def test_the_in_memory_client_needs_no_postgres(awa_memory_client: AwaTestClient) -> None:
    seen: list[int] = []
    client = awa_memory_client.client

    @client.task(Charge, queue="billing")
    def charge(job: awa.Job[Charge]) -> None:
        job.set_progress(100)
        seen.append(job.args.amount)

    await client.insert(Charge(3), queue="billing")
    await awa_memory_client.assert_enqueued(Charge, args={"amount": 3}, queue="billing")
    results = await awa_memory_client.drain("billing")
    assert [r.outcome for r in results] == ["completed"] and seen == [3]
    await awa_memory_client.clean()
    assert await awa_memory_client.enqueued() == []


async def test_memory_client_runs_another_clients_handlers() -> None:
    seen: list[int] = []
    app = awa.testing.memory_client()

    @app.task(Charge)
    async def charge(job: awa.Job[Charge]) -> None:
        seen.append(job.args.amount)

    mirror = awa.testing.memory_client(handlers_from=app)
    await mirror.insert(Charge(9))
    assert (await awa.testing.work_next(mirror)).is_completed()
    assert seen == [9]


def test_importing_awa_testing_needs_no_pytest() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; import awa.testing; "
        "print(sorted(awa.testing.__all__)[:2])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    legacy = subprocess.run(
        [sys.executable, "-c", "from awa.testing import awa_client; print(awa_client)"],
        capture_output=True,
        text=True,
    )
    assert legacy.returncode == 0, legacy.stderr


@pytest.mark.postgres
async def test_create_database_refuses_clearly_on_a_bad_server() -> None:
    with pytest.raises(RuntimeError, match="cannot create a test database") as raised:
        await create_database("postgresql://postgres:Hidd3nPw@127.0.0.1:1/postgres")
    assert "Hidd3nPw" not in str(raised.value)


async def test_memory_client_takes_the_handlers_of_an_app_with_no_reachable_database() -> None:
    # Building the app's client opens no connection, so this needs no Postgres.
    app = awa.AsyncClient("postgresql://postgres@127.0.0.1:1/nowhere")
    seen: list[int] = []

    @app.task(Charge)
    def charge(job: awa.Job[Charge]) -> None:
        seen.append(job.args.amount)

    memory = awa.testing.memory_client(handlers_from=app)
    await memory.insert(Charge(4))
    (result,) = await awa.testing.drain(memory)
    assert result.is_completed() and seen == [4]


APP_MODULE = """
import dataclasses
import awa

@dataclasses.dataclass
class Charge:
    amount: int

SEEN: list[int] = []

def create_client(url: str) -> awa.AsyncClient:
    client = awa.AsyncClient(url)

    @client.task(Charge, queue="billing")
    def charge(job: awa.Job[Charge]) -> None:
        SEEN.append(job.args.amount)

    return client

client = create_client("postgresql://postgres@127.0.0.1:1/nowhere")
"""

APP_TEST = """
import pytest
from awa.testing import AwaTestClient
from fd_app import SEEN, Charge

@pytest.mark.anyio
async def test_the_apps_handler_runs(awa_memory_client: AwaTestClient) -> None:
    await awa_memory_client.insert(Charge(7), queue="billing")
    (result,) = await awa_memory_client.drain("billing")
    assert result.is_completed(), result
    assert SEEN == [7]
"""


def _run_pytest(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(directory)},
    )


def test_awa_memory_client_runs_the_app_named_by_the_ini_option(tmp_path: Path) -> None:
    (tmp_path / "fd_app.py").write_text(APP_MODULE)
    (tmp_path / "test_app.py").write_text(APP_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nawa_app = fd_app:client\n")
    done = _run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_awa_memory_client_runs_the_app_of_an_overridden_fixture(tmp_path: Path) -> None:
    (tmp_path / "fd_app.py").write_text(APP_MODULE)
    (tmp_path / "test_app.py").write_text(APP_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "import pytest\nimport fd_app\n\n"
        "@pytest.fixture\ndef awa_app():\n"
        "    return fd_app.create_client('postgresql://localhost/unused')\n"
    )
    done = _run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_wrong_awa_app_option_is_named(tmp_path: Path) -> None:
    (tmp_path / "fd_app.py").write_text(APP_MODULE)
    (tmp_path / "test_app.py").write_text(APP_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nawa_app = fd_app:SEEN\n")
    done = _run_pytest(tmp_path)
    assert done.returncode != 0
    assert "awa_app: fd_app:SEEN must be an awa.AsyncClient or return one, got list" in (
        done.stdout + done.stderr
    )


_LEAVE_AND_EXIT = """
import asyncio
import awa.testing
from awa.testing import _database

async def main() -> None:
    async with awa.testing.temporary_database() as url:
        print(url, flush=True)
    print(*_database._TEMPLATES.values(), flush=True)

asyncio.run(main())
"""


@pytest.mark.postgres
async def test_a_temporary_database_is_dropped_after_its_process_has_exited(
    pg_server_url: str,
) -> None:
    """The process exits once the drop is sent, not after the server's checkpoint; the
    server finishes the drop without it."""
    done = subprocess.run(
        [sys.executable, "-c", _LEAVE_AND_EXIT],
        env={**os.environ, "AWA_TEST_DATABASE_URL": pg_server_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    url, template = done.stdout.strip().splitlines()
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    assert str(name).startswith("awa_throwaway_")
    assert template.startswith("awa_throwaway_template_")
    # the template it was copied from goes at exit too
    await until(
        lambda: (
            not database_exists(pg_server_url, str(name))
            and not database_exists(pg_server_url, template)
        ),
        "the database and its template dropped after its process exited",
    )


@pytest.mark.postgres
async def test_throw_away_databases_are_copies_of_one_migrated_template(
    pg_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migrations run once per process and server, into a template; each throw-away
    database is a copy of it, migrated and its own."""
    monkeypatch.setattr(_database, "_TEMPLATES", {})
    migrated: list[str] = []
    migrate = bootstrap.migrate

    async def counted(url: str) -> None:
        migrated.append(str(psycopg.conninfo.conninfo_to_dict(url)["dbname"]))
        await migrate(url)

    monkeypatch.setattr(bootstrap, "migrate", counted)
    first = await create_database(pg_server_url)
    second = await create_database(pg_server_url)
    try:
        [template] = _database._TEMPLATES.values()
        assert migrated == [template] and template.startswith("awa_throwaway_template_")
        async with awa.AsyncClient(first) as one, awa.AsyncClient(second) as other:
            await one.insert(Charge(1))
            assert [job.kind for job in await one.list_jobs()] == ["charge"]
            assert await other.list_jobs() == []
        # without migrations: an empty database, not a copy
        bare = await create_database(pg_server_url, migrate=False)
        try:
            with psycopg.connect(bare) as conn:
                row = conn.execute("SELECT to_regclass('awa.jobs') IS NULL").fetchone()
            assert row == (True,)
        finally:
            await drop_database(bare)
    finally:
        await drop_database(first, wait=False)
        await drop_database(second, wait=False)
        _database._drop_templates(_database._TEMPLATES)
    await until(lambda: not database_exists(pg_server_url, template), "the template dropped")


def test_a_background_drop_that_fails_is_logged_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    databases = pg_databases_module
    with caplog.at_level(logging.WARNING, logger="awa.testing"):
        databases.drop_database_in_background(
            "postgresql://postgres:Hidd3nPw@127.0.0.1:1/postgres", "awa_throwaway_gone"
        )
        assert databases._background.wait_sent(timeout=60)
    (record,) = [r for r in caplog.records if "awa_throwaway_gone" in r.getMessage()]
    assert "dropping awa_throwaway_gone failed" in record.getMessage()
    assert "Hidd3nPw" not in record.getMessage()
