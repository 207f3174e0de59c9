"""Where in the harness's latency window its slowest pickups fell.

The shared harness keeps every job's timestamps of a latency phase in its scratch folder
(``/tmp/bench-<run id>/<system>-<rate>-worker.json`` and ``-producer.json``). This reads
them and prints, per system: pickup p50 / p99, the p99 after the first two seconds of
load, the slowest 1 % by second of load, and the upper percentiles (p90 to p99.5), which
show where two systems' distributions part. Episodes (a start-up burst, a prune) show up
as a few seconds holding most of the slowest jobs; a spread-out tail does not.

Given several runs, it also pools them: per system the p99 of each run, their median,
and the percentiles over every job of every run; and, for each pair of systems, in how
many runs holding both the first one's p99 was at most the second's. On a host whose
runs differ a lot from one to the next, one run's p99 says little; pooled, the
comparison holds still.

With ``--split S`` it also prints each system's p50 / p97 / p99 before and after second
``S`` of the load (the second job onwards, as above). The harness installs a fresh ring
for each phase, so the ring's first prune comes a fixed time into the load (about 11 s
with the default ring of 16 one-second slots): the split shows the tail with and
without prunes in the same run.

    .venv/bin/python -m benchmarks.harness_slowest /tmp/bench-20261129-172406 --rate 200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks._common import by_second, percentile

#: The upper percentiles printed for each system.
LADDER = (0.90, 0.97, 0.98, 0.99, 0.995)


def job_pickups(folder: Path, system: str, rate: int) -> list[tuple[int, float]]:
    """(job sequence number, pickup ms) of one system's latency phase at ``rate``."""
    worker = folder / f"{system}-{rate}-worker.json"
    producer = folder / f"{system}-{rate}-producer.json"
    if not (worker.exists() and producer.exists()):
        return []
    starts = {int(seq): float(t) for seq, t in json.loads(worker.read_text())["starts"]}
    # producer records: seq, scheduled time, call time, commit time
    return [
        (int(seq), (starts[int(seq)] - float(commit)) * 1000)
        for seq, _sched, _call, commit in json.loads(producer.read_text())["recs"]
        if int(seq) in starts
    ]


def summarize(folder: Path, system: str, rate: int) -> str | None:
    rows = job_pickups(folder, system, rate)
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


def split(folder: Path, system: str, rate: int, at: float) -> str | None:
    """``system``'s pickups from second 2 of the load up to second ``at``, and after it."""
    rows = job_pickups(folder, system, rate)
    if not rows:
        return None
    parts = (
        (f"seconds 2-{at:g}", [ms for seq, ms in rows if 2 * rate <= seq < at * rate]),
        (f"after second {at:g}", [ms for seq, ms in rows if seq >= at * rate]),
    )
    return f"{system}: " + "; ".join(
        f"{name}: {len(v)} jobs, p50 {percentile(v, 0.5):.2f}, p97 {percentile(v, 0.97):.2f}, "
        f"p99 {percentile(v, 0.99):.2f} ms"
        for name, v in parts
    )


def pooled(folders: list[Path], systems: list[str], rate: int) -> list[str]:
    """The runs pooled: per system and per pair of systems (see the module's docstring)."""
    runs: dict[str, dict[Path, list[float]]] = {}
    for folder in folders:
        for system in systems:
            rows = job_pickups(folder, system, rate)
            if rows:
                runs.setdefault(system, {})[folder] = [ms for _, ms in rows]
    lines = []
    for system, by_run in runs.items():
        p99s = [percentile(v, 0.99) for v in by_run.values()]
        every = [ms for v in by_run.values() for ms in v]
        ladder = ", ".join(f"p{q * 100:g} {percentile(every, q):.2f}" for q in (0.5, *LADDER))
        lines.append(
            f"{system}: {len(by_run)} runs, p99 per run "
            f"{', '.join(f'{x:.1f}' for x in p99s)} (median {percentile(p99s, 0.5):.2f}); "
            f"all {len(every)} jobs (ms): {ladder}"
        )
    names = list(runs)
    for first in names:
        for second in names:
            if first == second:
                continue
            both = [f for f in runs[first] if f in runs[second]]
            if not both:
                continue
            at_most = sum(
                percentile(runs[first][f], 0.99) <= percentile(runs[second][f], 0.99) for f in both
            )
            lines.append(f"{first} p99 at most {second}'s in {at_most} of {len(both)} runs")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path, help="the harness's /tmp/bench-<run id>")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument(
        "--systems", default="awa-py,awa-pg,pgqueuer,procrastinate", help="comma-separated"
    )
    p.add_argument(
        "--split", type=float, default=None, help="also print the tail before / after this second"
    )
    a = p.parse_args()
    for folder in a.folders:
        print(folder)
        for system in a.systems.split(","):
            line = summarize(folder, system, a.rate)
            if line is not None:
                print("  " + line)
            parted = None if a.split is None else split(folder, system, a.rate, a.split)
            if parted is not None:
                print("    " + parted)
    if len(a.folders) > 1:
        print("pooled")
        for line in pooled(a.folders, a.systems.split(","), a.rate):
            print("  " + line)


if __name__ == "__main__":
    main()
