"""How many pytest-xdist workers the test command should use: one slice of the suite run
with each worker count in turn (interleaved rounds, so the counts see the same load),
with the wall time, the outcome, the summed test time per directory (from the junit
report) and the peak number of server connections the run held.

    python -m benchmarks.suite_workers --workers 2,3,4 --rounds 2 -- tests/contract -k inmemory

Everything after ``--`` goes to pytest (default: ``tests/unit``). The connections are
counted in ``pg_stat_activity`` by ``application_name``: each run gets its own through
``PGAPPNAME``, which every connection of the run takes (the tests', the clients' and the
subprocesses'), so other users of a shared server are not counted. A connection string
that names its own ``application_name`` is not counted. The server's ``max_connections``
is printed beside the peaks: ``scripts/test`` keeps its worker count within it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import psycopg

from tests.support.pg import LOCAL_URL

ROOT = Path(__file__).resolve().parents[1]


def _directory(classname: str) -> str:
    """``tests/integration`` for ``tests.integration.test_x`` (or ``tests.integration.web.t``)."""
    parts = classname.split(".")
    return "/".join(parts[:2]) if len(parts) > 1 else parts[0]


def junit_sums(path: Path) -> dict[str, tuple[int, float]]:
    """Per top directory: (test cases, summed seconds) of a junit report."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for case in ET.parse(path).getroot().iter("testcase"):
        entry = sums[_directory(case.get("classname", ""))]
        entry[0] += 1
        entry[1] += float(case.get("time", "0") or 0)
    return {name: (int(n), s) for name, (n, s) in sorted(sums.items())}


class ConnectionPeak:
    """Samples the connections named ``application`` until stopped; keeps the peak."""

    def __init__(self, server: str, application: str, interval: float) -> None:
        self.server = server
        self.application = application
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection-peak", daemon=True)

    def __enter__(self) -> ConnectionPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.server, autocommit=True, application_name="suite-workers") as c:
            while not self._stop.wait(self.interval):
                row = c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (self.application,),
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)


def max_connections(server: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    return int(row[0])


def run_once(
    workers: int, pytest_args: list[str], server: str, interval: float
) -> tuple[float, int, int, dict[str, tuple[int, float]], str]:
    """(wall s, pytest's exit code, peak connections, junit sums, last line of output)."""
    application = f"awa-suite-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="awa-suite-workers-") as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            str(workers),
            f"--junitxml={junit}",
            *pytest_args,
        ]
        env = {**os.environ, "PGAPPNAME": application}
        started = time.perf_counter()
        with ConnectionPeak(server, application, interval) as peak:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        sums = junit_sums(junit) if junit.exists() else {}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return wall, done.returncode, peak.peak, sums, lines[-1] if lines else done.stderr[-300:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Arguments after -- go to pytest (default: tests/unit).",
    )
    parser.add_argument(
        "--workers",
        default="2,3,4",
        help="comma-separated worker counts to compare (0 runs in the pytest process)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--server", default=os.environ.get("AWA_TEST_DATABASE_URL", LOCAL_URL))
    parser.add_argument(
        "--sample-interval", type=float, default=0.25, help="seconds between connection counts"
    )
    argv = sys.argv[1:]
    pytest_args = ["tests/unit"]
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    args = parser.parse_args(argv)
    try:
        counts = [int(part) for part in args.workers.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--workers takes comma-separated integers, got {args.workers!r}")
    if not counts or any(n < 0 for n in counts):
        parser.error(f"--workers takes worker counts of 0 or more, got {args.workers!r}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    print(f"pytest {' '.join(pytest_args)}")
    print(f"server max_connections {max_connections(args.server)}")
    print(f"load average at start: {os.getloadavg()}")
    for n in range(args.rounds):
        order = counts if n % 2 == 0 else list(reversed(counts))
        for workers in order:
            wall, code, peak, sums, last = run_once(
                workers, pytest_args, args.server, args.sample_interval
            )
            per_dir = ", ".join(f"{d} {c} tests {s:.0f} s" for d, (c, s) in sums.items())
            print(
                f"round {n + 1} -n {workers}: wall {wall:7.1f} s, exit {code}, "
                f"peak connections {peak}; {last}"
            )
            print(f"    {per_dir}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
