"""Where in the harness's latency window its slowest pickups fell.

The shared harness keeps every job's timestamps of a latency phase in its scratch folder
(``/tmp/bench-<run id>/<system>-<rate>-worker.json`` and ``-producer.json``). This reads
them and prints, per system: pickup p50 / p99, the p99 after the first two seconds of
load, the slowest 1 % by second of load, and the upper percentiles (p90 to p99.5), which
show where two systems' distributions part. Episodes (a start-up burst, a prune) show up
as a few seconds holding most of the slowest jobs; a spread-out tail does not.

    .venv/bin/python -m benchmarks.harness_slowest /tmp/bench-20261129-172406 --rate 200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks._common import by_second, percentile

#: The upper percentiles printed for each system.
LADDER = (0.90, 0.97, 0.98, 0.99, 0.995)


def summarize(folder: Path, system: str, rate: int) -> str | None:
    worker = folder / f"{system}-{rate}-worker.json"
    producer = folder / f"{system}-{rate}-producer.json"
    if not (worker.exists() and producer.exists()):
        return None
    starts = {int(seq): float(t) for seq, t in json.loads(worker.read_text())["starts"]}
    # producer records: seq, scheduled time, call time, commit time
    rows = [
        (int(seq), (starts[int(seq)] - float(commit)) * 1000)
        for seq, _sched, _call, commit in json.loads(producer.read_text())["recs"]
        if int(seq) in starts
    ]
    if not rows:
        return None
    pickups = [ms for _, ms in rows]
    steady = [ms for seq, ms in rows if seq >= 2 * rate]
    worst = sorted(rows, key=lambda r: -r[1])[: max(1, len(rows) // 100)]
    ladder = ", ".join(f"p{q * 100:g} {percentile(pickups, q):.2f}" for q in LADDER)
    return (
        f"{system}: {len(rows)} jobs, pickup p50 {percentile(pickups, 0.5):.2f} ms, "
        f"p99 {percentile(pickups, 0.99):.2f} ms, "
        f"p99 after the first 2 s {percentile(steady, 0.99):.2f} ms; "
        f"slowest {len(worst)} by second of load: {by_second((s for s, _ in worst), rate)}; "
        f"upper percentiles (ms): {ladder}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path, help="the harness's /tmp/bench-<run id>")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument(
        "--systems", default="awa-py,awa-pg,pgqueuer,procrastinate", help="comma-separated"
    )
    a = p.parse_args()
    for folder in a.folders:
        print(folder)
        for system in a.systems.split(","):
            line = summarize(folder, system, a.rate)
            if line is not None:
                print("  " + line)


if __name__ == "__main__":
    main()
