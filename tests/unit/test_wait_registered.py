"""``wait_registered`` (tests/fixtures/processes.py) waits for spawned workers' runtimes
with a bound only a hang reaches, so it must fail at once, with the worker's output, when
a worker exits instead of registering."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.processes import Worker, wait_registered


def test_a_worker_that_exits_fails_the_wait_at_once_with_its_output(tmp_path: Path) -> None:
    output = tmp_path / "worker.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", "print('no database here'); raise SystemExit(3)"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    process.wait(30)
    # No server answers there: the exit is seen before any query, which would raise
    # psycopg's OperationalError instead.
    with pytest.raises(AssertionError, match=r"exited \(3\)[\s\S]*no database here"):
        wait_registered("postgresql://nobody@127.0.0.1:1/none", 1, Worker(process, output))
