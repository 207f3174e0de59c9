"""The in-memory demo behind ``scripts/demo`` and ``python -m awa``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest

from awa.__main__ import entry_point
from awa.domain import JobState
from awa.entrypoints import demo
from awa.ports import JobFilter


@pytest.mark.anyio
async def test_demo_runs_every_job_to_its_expected_end() -> None:
    lines: list[str] = []
    engine = await demo.run_demo(lines.append)
    jobs = {job.id: job for job in await engine.list_jobs(JobFilter(), limit=100)}
    assert len(jobs) == 8
    by_state = {job_id: job.state for job_id, job in jobs.items()}
    assert [i for i, s in sorted(by_state.items()) if s == JobState.Failed] == [6, 8]
    assert all(s in (JobState.Completed, JobState.Failed) for s in by_state.values())
    # exhausted after max_attempts=3, one error per attempt
    assert jobs[6].attempt == 3
    assert len(jobs[6].errors) == 3
    # a terminal failure does not retry
    assert jobs[8].attempt == 1
    assert jobs[8].errors[-1].get("terminal") is True
    # retried once with a 2 s backoff, then completed
    assert jobs[5].attempt == 2
    # the snooze did not spend an attempt
    assert jobs[7].attempt == 1
    assert jobs[7].metadata["snoozes"] == 1


@pytest.mark.anyio
async def test_demo_narrates_priority_order_backoff_and_summary() -> None:
    lines: list[str] = []
    await demo.run_demo(lines.append)
    text = "\n".join(lines)
    claims = [line.split("claimed")[1].split()[0] for line in lines if "claimed" in line]
    assert claims.index("#4") < claims.index("#3")  # priority 1 before priority 3
    assert "retry    #5 charge_card: gateway timeout; next attempt at t+2s" in text
    assert "[t+ 10s] promoted 1 due job(s) to available" in text
    assert "snoozed  #7 generate_report for 5s (no attempt spent)" in text
    assert "failed   #6 sync_inventory: upstream unavailable (exhausted)" in text
    assert "billing            1       1       0" in text
    assert "[stale" not in text


def test_main_refuses_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--nope"]) == 2
    assert "usage" in capsys.readouterr().err


def test_main_prints_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main([]) == 0
    assert "completed #1 send_email" in capsys.readouterr().out


def test_module_entry_point_falls_back_to_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert entry_point() is demo.main


def test_module_entry_point_prefers_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    def cli_main() -> int:
        return 0

    fake_cli = types.ModuleType("awa.entrypoints.cli")
    fake_cli.main = cli_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "awa.entrypoints.cli", fake_cli)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert entry_point() is cli_main


def test_python_dash_m_awa_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "awa.entrypoints.demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "failed job #6 sync_inventory" in done.stdout
