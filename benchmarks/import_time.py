"""How long ``import awa`` takes, and the first use of the client layer, in fresh
interpreters: the median over ``--runs`` runs, with the number of modules each loads.

    python -m benchmarks.import_time --runs 15

Warm means the files are in the page cache (the first run warms it and is discarded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    result = measure(args.runs)
    print(
        f"import awa: {result['import_ms_median']:.1f} ms median, {result['modules']:.0f} "
        f"modules; first awa.AsyncClient: +{result['client_ms_median']:.1f} ms, "
        f"{result['modules_with_client']:.0f} modules; celpy loaded: "
        f"{bool(result['cel_loaded'])}"
    )


if __name__ == "__main__":
    main()
