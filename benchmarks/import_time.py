"""How long ``import awa``, the first client use and the ``awa`` command line take.

Each runs in fresh interpreters: the median over ``--runs`` runs, with the number of
modules each loads.

    python -m benchmarks.import_time --runs 15
    python -m benchmarks.import_time --runs 5 --cli

``--cli`` adds ``awa --help`` and one real command (``awa health`` against a scratch
database on ``--admin-url``'s server, migrated first), each as ``python -m awa`` in a
fresh process: median wall and CPU (user + system) milliseconds. Warm means the files are
in the page cache (the first run of each probe warms it and is discarded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks._common import DEFAULT_ADMIN_URL, drop_database, fresh_database

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import awa
t1 = time.perf_counter()
modules = len(sys.modules)
awa.AsyncClient
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "client_ms": (t2 - t1) * 1000,
                  "modules": modules, "modules_with_client": len(sys.modules),
                  "cel": "celpy" in sys.modules}))
"""


def measure(runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs + 1):
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
        )
        samples.append(json.loads(done.stdout))
    samples = samples[1:]
    return {
        "import_ms_median": statistics.median(s["import_ms"] for s in samples),
        "client_ms_median": statistics.median(s["client_ms"] for s in samples),
        "modules": samples[-1]["modules"],
        "modules_with_client": samples[-1]["modules_with_client"],
        "cel_loaded": float(any(s["cel"] for s in samples)),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_command(
    argv: Sequence[str], runs: int, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Median wall and CPU milliseconds of ``python -m awa ARGV`` over ``runs`` fresh
    processes (after one discarded warm-up run); each must exit 0."""
    walls: list[float] = []
    cpus: list[float] = []
    command = [sys.executable, "-m", "awa", *argv]
    for i in range(runs + 1):
        cpu0 = _children_cpu()
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
        if i > 0:
            walls.append(wall * 1000)
            cpus.append(cpu * 1000)
    return {"wall_ms_median": statistics.median(walls), "cpu_ms_median": statistics.median(cpus)}


def _cli_rows(runs: int, admin_url: str, db: str) -> list[tuple[str, dict[str, float]]]:
    rows = [("awa --help", measure_command(["--help"], runs))]
    url = fresh_database(admin_url, db)
    try:
        env = {**os.environ, "DATABASE_URL": url}
        env.pop("AWA_CONTEXT", None)
        subprocess.run(
            [sys.executable, "-m", "awa", "migrate"], capture_output=True, env=env, check=True
        )
        rows.append(("awa health", measure_command(["health"], runs, env)))
    finally:
        drop_database(admin_url, db)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--admin-url", default=DEFAULT_ADMIN_URL, help="server for --cli's scratch database"
    )
    p.add_argument(
        "--db", default="awa_bench_cli", help="--cli's scratch database (dropped and recreated)"
    )
    p.add_argument("--runs", type=int, default=15)
    p.add_argument(
        "--cli", action="store_true", help="also time `awa --help` and `awa health` (wall, CPU)"
    )
    args = p.parse_args()
    load = os.getloadavg()[0]
    result = measure(args.runs)
    print(
        f"import awa: {result['import_ms_median']:.1f} ms median, {result['modules']:.0f} "
        f"modules; first awa.AsyncClient: +{result['client_ms_median']:.1f} ms, "
        f"{result['modules_with_client']:.0f} modules; celpy loaded: "
        f"{bool(result['cel_loaded'])}"
    )
    if args.cli:
        for label, row in _cli_rows(args.runs, args.admin_url, args.db):
            print(
                f"{label}: {row['wall_ms_median']:.0f} ms wall, "
                f"{row['cpu_ms_median']:.0f} ms CPU (median of {args.runs})"
            )
    print(f"load average (1 min) at the start: {load:.1f}")


if __name__ == "__main__":
    main()
