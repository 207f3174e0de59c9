"""``awa dev``: example jobs through a real worker, on the test database or an embedded one."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from awa.entrypoints.dev import KIND_PATTERN, DevSummary, KindStats, Progress

pytestmark = [pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]


def _run_dev(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "awa", "dev", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _summary(stdout: str) -> dict[str, dict[str, int]]:
    """The per-kind rows of the summary table as ``{kind: {column: value}}``."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kind "))
    columns = ["jobs", "completed", "failed", "retried", "snoozed", "runs"]
    rows: dict[str, dict[str, int]] = {}
    for line in lines[header + 1 :]:
        fields = line.split()
        if not fields or fields[0] in ("total", "all", "time"):
            break
        rows[fields[0]] = dict(zip(columns, map(int, fields[2:8]), strict=True))
    return rows


def _expected_jobs(total: int) -> Counter[str]:
    return Counter(KIND_PATTERN[n % len(KIND_PATTERN)] for n in range(total))


def _check(stdout: str, total: int) -> None:
    assert f"all {total} jobs settled" in stdout, stdout
    rows = _summary(stdout)
    expected = _expected_jobs(total)
    assert {kind: row["jobs"] for kind, row in rows.items()} == dict(expected)
    for kind, row in rows.items():
        if kind == "import_feed":
            # Fails terminally on its only attempt.
            assert row["failed"] == row["jobs"] == row["runs"] and row["completed"] == 0
        else:
            assert row["completed"] == row["jobs"] and row["failed"] == 0, (kind, row)
    assert rows["sync_inventory"]["retried"] == 2 * rows["sync_inventory"]["jobs"]
    assert rows["sync_inventory"]["runs"] == 3 * rows["sync_inventory"]["jobs"]
    assert rows["charge_card"]["retried"] >= 1
    assert (
        rows["charge_card"]["runs"]
        == rows["charge_card"]["jobs"] + (rows["charge_card"]["retried"])
    )
    assert rows["generate_report"]["snoozed"] == rows["generate_report"]["jobs"]
    # Not a TTY: progress arrives as whole lines rather than carriage returns.
    assert re.search(r"^\[\s*\d+\.\ds\] \d+/\d+ settled", stdout, re.MULTILINE)
    assert "\r" not in stdout


def test_dev_against_the_test_database(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AWA_TEST_DATABASE_URL"}
    env["DATABASE_URL"] = database_url
    done = _run_dev(env, "--jobs", "60", "--workers", "4", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    _check(done.stdout, 60)
    assert "embedded" not in done.stdout


def test_dev_starts_an_embedded_postgres_without_a_database_url() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AWA_TEST_DATABASE_URL")
    }
    scratch = Path(tempfile.mkdtemp(prefix="awa-dev-test-"))
    data_dir = scratch / "pgdata"
    try:
        done = _run_dev(env, "--jobs", "40", "--data-dir", str(data_dir), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        _check(done.stdout, 40)
        assert f"starting embedded Postgres in {data_dir}" in done.stdout
        assert "embedded Postgres stopped" in done.stdout
        # The server kept its data directory for next time but is no longer running.
        assert (data_dir / "PG_VERSION").exists()
        assert not (data_dir / "postmaster.pid").exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_time_limit_reports_unfinished_jobs() -> None:
    summary = DevSummary(
        kinds=(KindStats(kind="send_email", queue="dev_1__email", jobs=10, completed=4, other=6),),
        elapsed=2.0,
        settled=False,
    )
    text = summary.render()
    assert "time limit reached after 2.0s with 6 of 10 jobs unfinished" in text
    assert re.search(r"^send_email\s+email\s+10\s+4\s+0", text, re.MULTILINE)


def test_progress_rewrites_one_line_on_a_tty() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=True, total=10)
    progress.update(Counter({"running": 3, "available": 7}), 0.5)
    progress.update(Counter({"completed": 10}), 1.0, final=True)
    text = out.getvalue()
    assert text.startswith("\r[  0.5s] 0/10 settled") and text.endswith("\n")
    assert text.count("\r") == 2 and text.count("\n") == 1
