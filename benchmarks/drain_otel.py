"""Drain throughput with OpenTelemetry recording vs without, alternating in one run.

Each round runs ``benchmarks.drain`` in a fresh interpreter, either with
``opentelemetry`` made unimportable (``off``: the no-op path a plain install takes) or
with the SDK meter provider, the Prometheus reader and a scrape of ``/metrics`` text
every second (``on``). Rounds alternate ``off, on, off, on, ...`` so a busy host
penalises both modes alike; the summary compares the medians.

    .venv/bin/python -m benchmarks.drain_otel --jobs 10000 --rounds 3
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys

from benchmarks._common import parser

_RATE = re.compile(r"^drain: \d+ in [\d.]+s = ([\d,]+)/s", re.M)
_CPU = re.compile(r"^cpu: worker [\d.]+ s \((\d+) us/job\)", re.M)

_BLOCK_OTEL = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, _Block())
"""

_WITH_OTEL = """
import threading, time
from awa.entrypoints import telemetry
telemetry.enable_prometheus()
def _scrape():
    while True:
        time.sleep(1.0)
        telemetry.prometheus_text()
threading.Thread(target=_scrape, daemon=True).start()
"""

_RUN = """
import sys
sys.argv = ["drain"] + {argv!r}
from benchmarks import drain
drain.main()
"""


def one_round(mode: str, argv: list[str]) -> tuple[float, float]:
    prelude = _BLOCK_OTEL if mode == "off" else _WITH_OTEL
    code = prelude + _RUN.format(argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode} round failed:\n{done.stdout}\n{done.stderr}")
    found = _RATE.search(done.stdout)
    if found is None:
        raise SystemExit(f"no drain rate in the {mode} round's output:\n{done.stdout}")
    rate = float(found.group(1).replace(",", ""))
    cpu = _CPU.search(done.stdout)
    per_job = float(cpu.group(1)) if cpu is not None else float("nan")
    print(f"{mode}: {rate:,.0f} jobs/s, worker CPU {per_job:.0f} us/job", flush=True)
    return rate, per_job


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=3, help="rounds per mode")
    a = p.parse_args()
    # A database of its own, so a plain drain benchmark running meanwhile is not disturbed.
    argv = [
        "--jobs",
        str(a.jobs),
        "--admin-url",
        a.admin_url,
        "--db",
        a.db or "awa_bench_drain_otel",
    ]
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(a.rounds):
        for mode in ("off", "on"):
            rate, cpu = one_round(mode, argv)
            rates[mode].append(rate)
            cpus[mode].append(cpu)
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
    print(
        f"median throughput off {off:,.0f}/s, on {on:,.0f}/s ({100.0 * (on - off) / off:+.1f} %); "
        f"worker CPU off {cpu_off:.0f} us/job, on {cpu_on:.0f} us/job "
        f"({100.0 * (cpu_on - cpu_off) / cpu_off:+.1f} %)",
        flush=True,
    )


if __name__ == "__main__":
    main()
