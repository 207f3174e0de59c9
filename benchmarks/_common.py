"""Shared helpers for the focused benchmarks: a scratch database and a profiler switch."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
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


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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


def report(label: str, ops: int, started: float, **extra: Any) -> float:
    elapsed = time.perf_counter() - started
    rate = ops / elapsed if elapsed > 0 else float("inf")
    tail = "".join(f"  {k}={v}" for k, v in extra.items())
    print(f"{label}: {ops} in {elapsed:.3f}s = {rate:,.0f}/s{tail}", flush=True)
    return rate
