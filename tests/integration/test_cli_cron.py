"""``awa cron list|remove|pause|resume|trigger`` against a real, migrated database."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner, Result

from awa.entrypoints.cli import cli

pytestmark = pytest.mark.postgres


def awa_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def _store(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, missed_fire_policy)"
            " VALUES ('nightly', '0 3 * * *', 'Europe/Berlin', 'report', 'reports', 'catch_up')"
        )


def test_list_pause_trigger_resume_remove(migrated_database_url: str) -> None:
    url = migrated_database_url
    _store(url)
    listed = awa_cli(url, "cron", "list")
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()
    assert header.split()[:6] == ["NAME", "CRON", "TIMEZONE", "MISSED", "KIND", "QUEUE"]
    assert row.split()[:8] == [
        "nightly", "0", "3", "*", "*", "*", "Europe/Berlin", "catch_up",
    ]  # fmt: skip
    (doc,) = json.loads(awa_cli(url, "cron", "list", "--json").stdout)
    assert doc["name"] == "nightly" and doc["next_fire_at"].endswith("Z")

    paused = awa_cli(url, "cron", "pause", "nightly", "--by", "ops")
    assert paused.exit_code == 0 and "Paused cron job nightly" in paused.output
    (doc,) = json.loads(awa_cli(url, "cron", "list", "--json").stdout)
    assert doc["paused_by"] == "ops" and doc["paused_at"] is not None

    triggered = awa_cli(url, "cron", "trigger", "nightly", "--json")
    assert triggered.exit_code == 0, triggered.output
    job = json.loads(triggered.stdout)
    assert (job["kind"], job["queue"], job["state"]) == ("report", "reports", "available")

    assert awa_cli(url, "cron", "resume", "nightly").exit_code == 0
    (doc,) = json.loads(awa_cli(url, "cron", "list", "--json").stdout)
    assert doc["paused_at"] is None

    removed = awa_cli(url, "cron", "remove", "nightly")
    assert removed.exit_code == 0 and "Removed cron job nightly" in removed.output
    assert json.loads(awa_cli(url, "cron", "list", "--json").stdout) == []


@pytest.mark.parametrize("command", ["remove", "pause", "resume", "trigger"])
def test_an_unknown_schedule_is_an_error(migrated_database_url: str, command: str) -> None:
    result = awa_cli(migrated_database_url, "cron", command, "missing")
    assert result.exit_code == 1
    assert "cron job not found: missing" in result.stderr
