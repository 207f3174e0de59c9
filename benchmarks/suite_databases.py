"""What a database test pays to get and give back its database: the test suite's
``DatabaseFactory`` dropping each database in the test's teardown (``drop``), releasing
it to be dropped in the background together with the others, the next clone made ahead
(``release``), and releasing it to be put back to its template's image and handed to the
next test (``reuse``, the suite's default). Interleaved rounds on one server, so the
modes see the same load; the server's requested checkpoints are counted per mode.

    python -m benchmarks.suite_databases --tests 12 --rounds 3

Per mode: the time on the tests' own path (clone + a query + teardown, summed over the
tests), and the session's end (``close()``: what is still to drop, and the templates).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import psycopg

from tests.conftest import migrate_template
from tests.support.pg import LOCAL_URL, DatabaseFactory

MODES = ("drop", "release", "reuse")


def _requested_checkpoints(server: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT checkpoints_req FROM pg_stat_bgwriter").fetchone()
    assert row is not None
    return int(row[0])


def _session(server: str, tests: int, teardown: str) -> tuple[float, float]:
    """One simulated session of ``tests`` database tests; (tests' path s, close s)."""
    factory = DatabaseFactory(server, reuse=teardown == "reuse")
    template = factory.template("migrated", migrate_template)
    give_back: Callable[[str], None] = factory.drop if teardown == "drop" else factory.release
    on_path = 0.0
    for _ in range(tests):
        started = time.perf_counter()
        url = factory.create(template)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT count(*) FROM awa.jobs")
        give_back(url)
        on_path += time.perf_counter() - started
    started = time.perf_counter()
    factory.close()
    return on_path, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default=os.environ.get("AWA_TEST_DATABASE_URL", LOCAL_URL))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for n in range(args.rounds):
        order = MODES[n % len(MODES) :] + MODES[: n % len(MODES)]
        for mode in order:
            checkpoints = _requested_checkpoints(args.server)
            path, close = _session(args.server, args.tests, mode)
            checkpoints = _requested_checkpoints(args.server) - checkpoints
            results[mode].append((path, close))
            print(
                f"round {n + 1} {mode:>7}: tests' path {path:6.2f} s "
                f"({path / args.tests * 1000:6.0f} ms a test), close {close:6.2f} s, "
                f"{checkpoints} requested checkpoints (any run's)",
                flush=True,
            )
    for mode, runs in results.items():
        per_test = statistics.median(path / args.tests for path, _ in runs) * 1000
        total = statistics.median(path + close for path, close in runs)
        print(f"{mode:>7}: median {per_test:6.0f} ms a test; session with close {total:6.2f} s")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
