"""Shared helpers for the focused benchmarks: a scratch database and a profiler switch."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg

DEFAULT_ADMIN_URL = os.environ.get(
    "AWA_BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--admin-url", default=DEFAULT_ADMIN_URL, help="server to create the scratch DB on"
    )
    p.add_argument("--db", default=None, help="scratch database name (dropped and recreated)")
    p.add_argument(
        "--profile",
        choices=("none", "pyinstrument"),
        default="none",
        help="run the measured part under pyinstrument and print the call tree",
    )
    return p


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and recreate ``name``; returns its URL."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def database_from_template(admin_url: str, name: str, template: str) -> str:
    """Drop ``name`` and create it as a copy of ``template`` (``CREATE DATABASE ...
    TEMPLATE``: the files are copied, no migration runs); returns its URL. Sessions
    still on the template (a pool closing behind the benchmark) are ended first, since
    the copy refuses a template with sessions."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (template,),
        )
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def drop_database(admin_url: str, name: str) -> None:
    """Drop ``name``, ending its sessions; on a loaded host a session may take longer to
    end than the server waits for (ObjectInUse), so the drop is tried again a few times."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for attempt in range(5):
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except psycopg.errors.ObjectInUse:
                if attempt == 4:
                    raise
                time.sleep(1.0)


@contextlib.contextmanager
def maybe_profile(kind: str) -> Iterator[None]:
    if kind != "pyinstrument":
        yield
        return
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="enabled", interval=0.0005)
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by rank; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def by_second(seqs: Iterable[int], rate: float) -> dict[int, int]:
    """How many of the jobs numbered ``seqs`` (offered at ``rate`` per second from 0)
    fall in each second of the load, in order of the second."""
    counts: dict[int, int] = {}
    for seq in seqs:
        second = int(seq // rate)
        counts[second] = counts.get(second, 0) + 1
    return dict(sorted(counts.items()))


def report(label: str, ops: int, started: float, **extra: Any) -> float:
    elapsed = time.perf_counter() - started
    rate = ops / elapsed if elapsed > 0 else float("inf")
    tail = "".join(f"  {k}={v}" for k, v in extra.items())
    print(f"{label}: {ops} in {elapsed:.3f}s = {rate:,.0f}/s{tail}", flush=True)
    return rate


class CpuMeter:
    """CPU seconds of this process and of the Postgres backends serving ``database``
    (read from ``/proc``, so only when the server runs on this host; sampled every 50 ms
    because backends may exit before the end)."""

    def __init__(self, admin_url: str, database: str) -> None:
        import resource
        import threading

        self._resource = resource
        self._admin_url = admin_url
        self._database = database
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._base_self = 0.0
        self._base_pg = 0.0

    def _self_cpu(self) -> float:
        usage = self._resource.getrusage(self._resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def _sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            while not self._stop.is_set():
                pids = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self._database,)
                ).fetchall()
                for (pid,) in pids:
                    try:
                        with open(f"/proc/{pid}/stat") as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                        self._seen[pid] = (int(fields[11]) + int(fields[12])) / tick
                    except (OSError, IndexError, ValueError):
                        continue
                self._stop.wait(0.05)

    def start(self) -> None:
        self._thread.start()
        time.sleep(0.1)
        self._base_self = self._self_cpu()
        self._base_pg = sum(self._seen.values())

    def stop(self) -> tuple[float, float]:
        """(this process, Postgres backends) CPU seconds since :meth:`start`."""
        used_self = self._self_cpu() - self._base_self
        self._stop.set()
        self._thread.join()
        return used_self, sum(self._seen.values()) - self._base_pg
