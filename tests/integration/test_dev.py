"""``awa dev``: example jobs through a real worker, on the test database or an embedded one."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from awa.entrypoints.dev import KIND_PATTERN, DevSummary, KindStats, Progress
from awa.entrypoints.dev_embedded import OWNER_FILE, SCRATCH_PREFIX, reap_leftovers, stop_server

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
    progress = Progress(out, tty=True, total=10, columns=200)
    progress.update(Counter({"running": 3, "available": 7}), 0.5)
    progress.update(Counter({"completed": 10}), 1.0, final=True)
    text = out.getvalue()
    assert text.startswith("\r[  0.5s] 0/10 settled") and text.endswith("\n")
    assert text.count("\r") == 2 and text.count("\n") == 1


@pytest.fixture
def dev_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of its own for ``awa dev``'s scratch data directories
    (world-traversable: the embedded server runs as another user under root)."""
    base = Path(tempfile.mkdtemp(prefix="awa-devtmp-"))
    base.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    try:
        yield base
    finally:
        for leftover in base.glob(f"{SCRATCH_PREFIX}*"):
            stop_server(leftover / "pgdata")
        shutil.rmtree(base, ignore_errors=True)


def _start_dev(tmpdir: Path) -> tuple[subprocess.Popen[str], Path, int]:
    """An ``awa dev`` run on a fresh embedded server, once its worker has started: the
    process, its scratch directory and the server's pid."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AWA_TEST_DATABASE_URL")
    }
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir))
    process = subprocess.Popen(
        [sys.executable, "-m", "awa", "dev", "--jobs", "4000", "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "starting a worker" in line:
            break
    else:
        process.wait(timeout=60)
        raise AssertionError("".join(seen))
    (scratch,) = tmpdir.glob(f"{SCRATCH_PREFIX}*")
    pid = int((scratch / "pgdata" / "postmaster.pid").read_text().split()[0])
    return process, scratch, pid


def _gone(pid: int, *, within: float = 0.0) -> bool:
    """Whether process ``pid`` has ended, waiting up to ``within`` seconds for it (a
    stopped server's postmaster outlives its pid file by a moment)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@pytest.mark.skipif(os.geteuid() != 0, reason="a scratch data directory is used as root")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_dev_stops_its_server_and_removes_its_data_on_a_signal(
    dev_tmpdir: Path, signum: signal.Signals
) -> None:
    process, scratch, server_pid = _start_dev(dev_tmpdir)
    process.send_signal(signum)
    try:
        rest, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        rest, _ = process.communicate()
        raise AssertionError(f"awa dev did not exit on {signum.name}:\n{rest}") from None
    assert process.returncode == 128 + signum, rest
    assert f"stopped by {signum.name}" in rest
    assert not scratch.exists(), rest
    assert _gone(server_pid, within=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="a scratch data directory is used as root")
def test_the_next_run_removes_what_a_killed_run_left(dev_tmpdir: Path) -> None:
    process, scratch, server_pid = _start_dev(dev_tmpdir)
    process.kill()
    process.wait(timeout=60)
    # Killed outright: nothing could clean up.
    assert scratch.exists() and not _gone(server_pid)
    out = io.StringIO()
    reap_leftovers(None, out)
    assert not scratch.exists()
    assert _gone(server_pid, within=30)
    assert f"removed {scratch} left by an earlier run (its server was still running" in (
        out.getvalue()
    )


def test_reaping_keeps_directories_of_live_or_unknown_owners(dev_tmpdir: Path) -> None:
    mine = dev_tmpdir / f"{SCRATCH_PREFIX}live"
    mine.mkdir()
    (mine / OWNER_FILE).write_text(str(os.getpid()))
    unmarked = dev_tmpdir / f"{SCRATCH_PREFIX}test-data"
    unmarked.mkdir()
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], text=True, capture_output=True
    )
    dead = dev_tmpdir / f"{SCRATCH_PREFIX}dead"
    (dead / "pgdata").mkdir(parents=True)
    (dead / OWNER_FILE).write_text(finished.stdout.strip())
    out = io.StringIO()
    reap_leftovers(None, out)
    assert mine.exists() and unmarked.exists() and not dead.exists()
    assert out.getvalue() == f"removed {dead} left by an earlier run\n"


def test_the_live_line_fits_an_80_column_terminal() -> None:
    busy = Counter(
        {
            "scheduled": 12,
            "available": 1000,
            "running": 16,
            "retryable": 5,
            "waiting_external": 3,
            "completed": 1500,
            "failed": 170,
        }
    )
    out = io.StringIO()
    progress = Progress(out, tty=True, total=3000, columns=80)
    progress.update(busy, 12.3)
    progress.update(Counter({"completed": 2830, "failed": 170}), 20.0, final=True)
    lines = out.getvalue().split("\r")[1:]
    assert all(len(line.rstrip("\n")) <= 79 for line in lines), lines
    assert lines[0].startswith("12.3s 1964/3000: sched 12 avail 1000 run 16 retry 5 wait 3")
    # Wide enough, the full wording is kept.
    wide = Progress(io.StringIO(), tty=True, total=3000, columns=200)
    assert "waiting_external 3" in wide.render(busy, 12.3, width=199)
    # Too narrow even for the short form: cut, never wrapped.
    assert Progress(out, tty=True, total=3000).render(busy, 1.0, width=30).endswith("…")
