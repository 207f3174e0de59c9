"""The ``awa`` command line loads only what the command it runs uses: its help, and a
command's help, load neither the driver nor the engines, the client, the runtime, the
web server, telemetry nor CEL; a command that reads the database loads the driver and
the schema admin, not the engines or the runtime (ADR 0018)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Modules a command that prints help has no use for.
NOT_FOR_HELP = (
    "psycopg",
    "psycopg_pool",
    "anyio",
    "celpy",
    "opentelemetry",
    "starlette",
    "jinja2",
    "cattrs",
    "awa.entrypoints.bootstrap",
    "awa.entrypoints.client_async",
    "awa.entrypoints.routing",
    "awa.adapters.postgres_queue_storage.engine",
    "awa.runtime.runtime",
)
#: Modules ``awa health`` has no use for: it reads the schema admin, not the engines.
NOT_FOR_HEALTH = (
    "celpy",
    "starlette",
    "awa.entrypoints.client_async",
    "awa.entrypoints.routing",
    "awa.adapters.postgres_queue_storage.engine",
    "awa.adapters.postgres_canonical",
    "awa.adapters.inmemory",
    "awa.runtime.runtime",
    "awa.runtime.heartbeat",
)


def imported(args: list[str], env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """Run ``python -X importtime -m awa ARGS``; its exit code and the modules it
    imported (top-level packages and full dotted names alike)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "awa", *args],
        capture_output=True,
        text=True,
        env=env,
    )
    names: set[str] = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    # importlib.import_module (how `python -m awa` loads the CLI) is not timed, its
    # imports are.
    assert "awa.entrypoints.cli._common" in names, done.stderr[-2000:]
    return done.returncode, names


@pytest.mark.parametrize(
    "args",
    [["--help"], ["queue", "stats", "--help"], ["health", "--help"], ["serve", "--help"]],
    ids=" ".join,
)
def test_help_loads_no_heavy_module(args: list[str]) -> None:
    code, names = imported(args)
    assert code == 0
    assert sorted(names.intersection(NOT_FOR_HELP)) == []


def test_a_command_that_reads_the_database_loads_the_driver_not_the_engines(
    database_url: str,
) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("AWA_CONTEXT", None)
    code, names = imported(["health", "--json"], env)
    assert code in (0, 1)  # 1: the scratch database is not migrated: still a real read
    assert "psycopg" in names
    assert sorted(names.intersection(NOT_FOR_HEALTH)) == []
