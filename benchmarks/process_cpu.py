"""CPU time and run-queue wait per kind of process, sampled from ``/proc`` while a harness
run goes on (Linux only, local server only).

Record beside a harness run, then report over the seconds each system's phase ran (from
the harness's ``[bench HH:MM:SS]`` lines, UTC)::

    python -m benchmarks.process_cpu record /tmp/cpu.jsonl --seconds 120 &
    (cd ../shared/bench && /tmp/bench-venvs/harness/bin/python bench.py ...)
    python -m benchmarks.process_cpu report /tmp/cpu.jsonl \\
        awa-py=11:25:42-11:26:00 pgqueuer=11:26:10-11:26:27 --jobs-per-second 200

Processes are grouped as Postgres backends, Postgres's own processes, and the harness's
runner processes by phase (``produce``, ``work``). Per group: CPU milliseconds per
second (and per job with ``--jobs-per-second``), run-queue wait per second, and the mean
wait per time slice (``/proc/<pid>/schedstat``: time on a CPU, time waiting for one,
slices).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_POSTGRES_OWN = ("walwriter", "checkpointer", "background writer", "autovacuum", "stats", "logical")
_PHASE = re.compile(r"--phase (\w+)")


@dataclass(frozen=True)
class Counters:
    on_cpu_ns: int
    waiting_ns: int
    slices: int
    command: str


def schedstat(pid: str) -> tuple[int, int, int] | None:
    """Process ``pid``'s time on a CPU and waiting for one (ns), and its time slices;
    ``None`` when it is gone, or the kernel keeps no schedstat."""
    try:
        on_cpu, waiting, slices = (
            int(v) for v in Path(f"/proc/{pid}/schedstat").read_text().split()
        )
    except (OSError, ValueError):
        return None
    return on_cpu, waiting, slices


def command_of(pid: str) -> str | None:
    """Process ``pid``'s command line (its first 600 characters); ``None`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:600]
    except OSError:
        return None


def _sample() -> dict[str, Counters]:
    found: dict[str, Counters] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat, command = schedstat(pid), command_of(pid)
        if stat is not None and command is not None:
            found[pid] = Counters(*stat, command)
    return found


#: The groups of the server's processes (:func:`group_of`).
POSTGRES_GROUPS = ("backends", "postgres (own)")


def group_of(command: str) -> str | None:
    """The group a process counts in, or ``None`` for processes outside the run."""
    if command.startswith("postgres:"):
        return (
            POSTGRES_GROUPS[1] if any(k in command for k in _POSTGRES_OWN) else POSTGRES_GROUPS[0]
        )
    if "runner.py" in command:
        phase = _PHASE.search(command)
        return f"runner {phase.group(1) if phase else '?'}"
    return None


def record(out: Path, seconds: float) -> None:
    end = time.time() + seconds
    with out.open("w") as f:
        while time.time() < end:
            snap = {pid: c.__dict__ for pid, c in _sample().items()}
            f.write(json.dumps({"t": time.time(), "p": snap}) + "\n")
            f.flush()
            time.sleep(1.0)


Snapshot = tuple[float, dict[str, Counters]]


def _load(samples: Path) -> list[Snapshot]:
    snaps: list[Snapshot] = []
    for line in samples.read_text().splitlines():
        if line:
            raw = json.loads(line)
            snaps.append((float(raw["t"]), {pid: Counters(**c) for pid, c in raw["p"].items()}))
    return snaps


def _at(snaps: list[Snapshot], when: float) -> Snapshot:
    return min(snaps, key=lambda s: abs(s[0] - when))


def _clock(day: datetime, hms: str) -> float:
    h, m, s = (int(v) for v in hms.split(":"))
    return day.replace(hour=h, minute=m, second=s, microsecond=0).timestamp()


def report(samples: Path, windows: list[str], jobs_per_second: float | None) -> None:
    snaps = _load(samples)
    if not snaps:
        raise SystemExit(f"{samples}: no samples")
    day = datetime.fromtimestamp(snaps[0][0], UTC)
    for window in windows:
        name, _, span = window.partition("=")
        first, _, last = span.partition("-")
        if not (name and first and last):
            raise SystemExit(f"window {window!r}: expected NAME=HH:MM:SS-HH:MM:SS")
        (t0, before), (t1, after) = _at(snaps, _clock(day, first)), _at(snaps, _clock(day, last))
        elapsed = t1 - t0
        if elapsed <= 0:
            raise SystemExit(f"window {window!r}: no samples inside it")
        totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        for pid, c in after.items():
            group = group_of(c.command)
            if group is None:
                continue
            b = before.get(pid, Counters(0, 0, 0, c.command))
            total = totals[group]
            total[0] += c.on_cpu_ns - b.on_cpu_ns
            total[1] += c.waiting_ns - b.waiting_ns
            total[2] += c.slices - b.slices
        print(f"{name} ({elapsed:.0f} s)")
        for group, (on_cpu, waiting, slices) in sorted(totals.items()):
            cpu_ms = on_cpu / elapsed / 1e6
            per_job = f", {cpu_ms / jobs_per_second:.2f} ms a job" if jobs_per_second else ""
            print(
                f"  {group:16s} CPU {cpu_ms:6.0f} ms/s{per_job}; run queue "
                f"{waiting / elapsed / 1e6:5.0f} ms/s, {waiting / max(slices, 1) / 1e3:4.0f} us "
                f"a slice ({slices / elapsed:.0f} slices/s)"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="sample every second into a JSON-lines file")
    rec.add_argument("out", type=Path)
    rec.add_argument("--seconds", type=float, default=120.0)
    rep = sub.add_parser("report", help="per-group CPU and run-queue wait over windows")
    rep.add_argument("samples", type=Path)
    rep.add_argument("windows", nargs="+", help="NAME=HH:MM:SS-HH:MM:SS (UTC)")
    rep.add_argument("--jobs-per-second", type=float, default=None)
    a = p.parse_args()
    if a.command == "record":
        record(a.out, a.seconds)
    else:
        report(a.samples, a.windows, a.jobs_per_second)


if __name__ == "__main__":
    main()
