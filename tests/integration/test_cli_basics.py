"""The ``awa`` command line: global options, exit codes, migrate, health, context, storage.

Uses click's ``CliRunner`` for most checks and real ``python -m awa`` subprocesses for the
console entry point, both against a fresh database per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner, Result

from awa.adapters._pg.leader import PostgresLeaderLock
from awa.entrypoints import bootstrap
from awa.entrypoints.cli import cli
from awa.entrypoints.cli._common import redact_url

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    runner = CliRunner()
    return runner.invoke(cli, list(args), env={"DATABASE_URL": None, **(env or {})})


def with_password(url: str, password: str) -> str:
    split = urlsplit(url)
    user = split.username or "postgres"
    host = split.hostname or "127.0.0.1"
    port = f":{split.port}" if split.port else ""
    return urlunsplit(
        (split.scheme, f"{user}:{password}@{host}{port}", split.path, split.query, "")
    )


def schema_version(url: str) -> int:
    with psycopg.connect(url) as conn:
        present = conn.execute("SELECT to_regclass('awa.schema_version')").fetchone()
        if present is None or present[0] is None:
            return 0
        row = conn.execute("SELECT coalesce(max(version), 0) FROM awa.schema_version").fetchone()
        return int(row[0]) if row else 0


def run_module(*args: str, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if env_url is not None:
        env["DATABASE_URL"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "awa", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env=env,
    )


def test_redact_url_strips_passwords() -> None:
    assert redact_url("postgresql://u:pw@h:5432/db") == "postgresql://u@h:5432/db"
    assert redact_url("postgres://u@h/db?password=pw&sslmode=require") == (
        "postgres://u@h/db?sslmode=require"
    )
    assert redact_url("host=h password=pw dbname=db") == "host=h dbname=db"
    assert redact_url("postgresql://:pw@h/db") == "postgresql://h/db"


def test_missing_database_url_is_a_usage_error() -> None:
    result = invoke("job", "list")
    assert result.exit_code == 2
    assert "no database target" in result.stderr
    assert "--database-url" in result.stderr


def test_version_and_help_need_no_database() -> None:
    version = invoke("--version")
    assert version.exit_code == 0
    assert version.stdout.startswith("awa, version ")
    helped = invoke("--help")
    assert helped.exit_code == 0
    for group in ("migrate", "job", "queue", "dlq", "health", "context", "storage"):
        assert group in helped.stdout
    assert "queue-stats" not in helped.stdout
    assert invoke("no-such-command").exit_code == 2


def test_migrate_sql_prints_without_a_database() -> None:
    result = invoke("migrate", "--sql")
    assert result.exit_code == 0, result.stderr
    for version, description, _ in bootstrap.migrations():
        assert f"-- Migration V{version}: {description}" in result.stdout
    assert "CREATE TABLE awa.schema_version" in result.stdout
    # then the schema files, which migrate applies after the stream
    last = result.stdout.index(f"-- Migration V{bootstrap.current_migration_version()}:")
    for path, sql in bootstrap.schema_files():
        assert result.stdout.index(f"-- Schema file {path}\n{sql.rstrip()}") > last


def test_migrate_sql_selects_ranges_and_single_versions() -> None:
    first, second = bootstrap.migrations()[:2]
    ranged = invoke("migrate", "--sql", "--from", str(first[0]), "--to", str(second[0]))
    assert ranged.exit_code == 0, ranged.stderr
    assert f"V{second[0]}:" in ranged.stdout
    assert f"V{first[0]}:" not in ranged.stdout
    single = invoke("migrate", "--sql", "--version", str(first[0]))
    assert single.exit_code == 0
    assert f"V{first[0]}:" in single.stdout
    assert f"V{second[0]}:" not in single.stdout
    assert invoke("migrate", "--sql", "--version", "9999").exit_code == 2
    assert invoke("migrate", "--version", "1").exit_code == 2


def test_migrate_extract_to_writes_each_migration_and_schema_file(tmp_path: Path) -> None:
    """awa-cli 0.6.9's --extract-to: the SQL as files named for tools that apply a
    directory (V<version>__<description>.sql, then the schema files in their order)."""
    out = tmp_path / "sql"
    result = invoke("migrate", "--extract-to", str(out))
    assert result.exit_code == 0, result.stderr
    migrations = bootstrap.migrations()
    files = bootstrap.schema_files()
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == len(migrations) + len(files)
    for version, description, sql in migrations:
        path = out / f"V{version}__{description.replace(' ', '_')}.sql"
        assert path.read_text("utf-8").rstrip("\n") == sql.rstrip("\n")
        assert f"Extracted: {path}" in result.stdout
    repeatable = sorted(name for name in written if name.startswith("R__"))
    assert [(out / name).read_text("utf-8").rstrip("\n") for name in repeatable] == [
        sql.rstrip("\n") for _, sql in files
    ]
    first, second = migrations[:2]
    ranged = tmp_path / "ranged"
    selected = invoke(
        "migrate", "--extract-to", str(ranged), "--from", str(first[0]), "--to", str(second[0])
    )
    assert selected.exit_code == 0, selected.stderr
    assert [p.name.split("__")[0] for p in ranged.iterdir()] == [f"V{second[0]}"]
    both = invoke("migrate", "--sql", "--extract-to", str(out))
    assert both.exit_code == 2 and "give one of them" in both.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    refused = invoke("migrate", "--extract-to", str(blocked / "sub"))
    assert refused.exit_code == 1 and "cannot extract migrations" in refused.stderr


def test_migrate_sql_does_not_apply(database_url: str) -> None:
    result = invoke("--database-url", database_url, "migrate", "--sql")
    assert result.exit_code == 0
    assert schema_version(database_url) == 0


def test_migrate_applies_then_pending_prints_nothing(database_url: str) -> None:
    before = invoke("--database-url", database_url, "migrate", "--pending")
    assert before.exit_code == 0, before.stderr
    assert "-- Migration V1:" in before.stdout
    assert "-- Schema file schema/views/awa.jobs.sql" in before.stdout
    assert schema_version(database_url) == 0

    applied = invoke("--database-url", database_url, "migrate")
    assert applied.exit_code == 0, applied.stderr
    latest = bootstrap.current_migration_version()
    assert f"schema now at version {latest}" in applied.stdout
    assert schema_version(database_url) == latest

    pending = invoke("--database-url", database_url, "migrate", "--pending")
    assert pending.exit_code == 0
    assert pending.stdout == ""
    again = invoke("--database-url", database_url, "migrate")
    assert "nothing to apply" in again.stdout


def test_echoed_target_has_no_password(database_url: str) -> None:
    secret_url = with_password(database_url, "s3cr3t-pw")
    result = invoke("migrate", env={"DATABASE_URL": secret_url})
    assert result.exit_code == 0, result.stderr
    assert "s3cr3t-pw" not in result.stderr + result.stdout
    assert f"awa: database {redact_url(secret_url)}" in result.stderr
    assert urlsplit(redact_url(secret_url)).path == urlsplit(database_url).path


def test_health_reports_unmigrated_then_ready(database_url: str) -> None:
    unmigrated = invoke("--database-url", database_url, "health")
    assert unmigrated.exit_code == 1
    assert "run `awa migrate`" in unmigrated.stdout
    assert "unhealthy" in unmigrated.stdout
    invoke("--database-url", database_url, "migrate")
    ready = invoke("--database-url", database_url, "health", "--json")
    assert ready.exit_code == 0, ready.stdout
    report = json.loads(ready.stdout)
    assert report["ready"] is True
    assert report["problems"] == []
    assert report["schema_version"] == bootstrap.current_migration_version()
    # A database installed fresh starts on queue storage (ADR 0020).
    assert report["storage"]["state"] == "active"
    assert report["storage"]["schema"] == "awa"
    assert report["storage"]["engine"] == "storage engine: queue storage (schema awa)"
    assert report["runtimes"]["live"] == 0
    text = invoke("--database-url", database_url, "health")
    assert re.search(r"^engine +queue storage \(schema awa\)$", text.stdout, re.M)
    assert report["leader"] is None
    assert "none yet" in text.stdout


def test_health_names_the_maintenance_leader_and_a_lapsed_lease(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url

    async def lead() -> PostgresLeaderLock:
        lock = PostgresLeaderLock(url, holder="host-a/4242/abcd1234")
        assert (await lock.try_acquire(30.0)).held
        return lock

    async def release(lock: PostgresLeaderLock) -> None:
        await lock.release()

    lock = asyncio.run(lead())
    report = json.loads(invoke("--database-url", url, "health", "--json").stdout)
    assert report["leader"]["holder"] == "host-a/4242/abcd1234"
    assert report["leader"]["live"] is True
    assert 0 < report["leader"]["expires_in_s"] <= 30
    text = invoke("--database-url", url, "health").stdout
    assert "host-a/4242/abcd1234 (term 1, lease" in text
    asyncio.run(release(lock))
    text = invoke("--database-url", url, "health").stdout
    assert "the lease of host-a/4242/abcd1234 (term 1) expired" in text


def test_health_unreachable_database_exits_1() -> None:
    result = invoke(
        "--database-url",
        "postgresql://postgres:pw@127.0.0.1:1/nowhere",
        "health",
        "--connect-timeout",
        "1",
    )
    assert result.exit_code == 1
    assert "database unreachable" in result.stdout
    assert "pw@" not in result.stdout + result.stderr


def test_context_shows_target_versions_and_engine(database_url: str) -> None:
    invoke("--database-url", database_url, "migrate")
    result = invoke("--database-url", database_url, "--json", "context")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["database"] == redact_url(database_url)
    assert info["schema_version"] == bootstrap.current_migration_version()
    assert info["active_engine"] == "queue_storage"  # installed fresh (ADR 0020)
    assert info["package_version"]
    text = invoke("--database-url", database_url, "context")
    assert "active engine" in text.stdout
    assert "queue_storage" in text.stdout


def test_storage_status_requires_migrated_schema(database_url: str) -> None:
    result = invoke("--database-url", database_url, "storage", "status")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("awa: error: the database is not")
    assert "Traceback" not in result.stderr
    invoke("--database-url", database_url, "migrate")
    status = invoke("--database-url", database_url, "storage", "status", "--json")
    assert status.exit_code == 0, status.stderr
    report = json.loads(status.stdout)
    # Installed fresh: straight to queue storage (ADR 0020).
    assert report["state"] == "active"
    assert report["active_engine"] == "queue_storage"
    assert report["transition_epoch"] == 1
    assert report["details"] == {"schema": "awa", "fresh_install": True}
    text = invoke("--database-url", database_url, "storage", "status")
    assert "active_engine" in text.stdout


def test_unmigrated_job_command_fails_with_one_line(database_url: str) -> None:
    result = invoke("--database-url", database_url, "job", "list")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("awa: error:")
    assert "awa migrate" in lines[-1]
    assert "Traceback" not in result.stderr


def test_python_dash_m_awa_end_to_end(database_url: str) -> None:
    secret_url = with_password(database_url, "hidden-pw")
    no_url = run_module("job", "list")
    assert no_url.returncode == 2
    assert "no database target" in no_url.stderr

    migrated = run_module("migrate", env_url=secret_url)
    assert migrated.returncode == 0, migrated.stderr
    assert "hidden-pw" not in migrated.stderr
    assert f"awa: database {redact_url(secret_url)}" in migrated.stderr

    listed = run_module("--database-url", secret_url, "job", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []

    missing = run_module("--database-url", secret_url, "job", "dump", "424242")
    assert missing.returncode == 1
    err_lines = missing.stderr.strip().splitlines()
    assert err_lines[-1] == "awa: error: job not found: 424242"
    assert len(err_lines) == 2  # the target line and the error line
    assert "Traceback" not in missing.stderr

    debug = run_module("--database-url", secret_url, "--debug", "job", "dump", "424242")
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
