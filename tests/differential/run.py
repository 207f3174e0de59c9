"""Differential run: the same public-call sequences against awa-pg 0.6.9 and this package.

    python -m tests.differential.run [--only NAME ...] [--report FILE]
        [--awa-pg-python PATH] [--server-url URL]

Each scenario of ``scenarios.py`` runs twice, each time on a fresh database: once under
awa-pg 0.6.9 (installed from the package index into a scratch virtualenv under
``~/.cache/awa/differential`` unless ``--awa-pg-python`` names one) and once under this
checkout. The observations (exception types and messages, states, fields) are diffed key
by key; the exit status is 1 when any differ. This is not part of the test command: it
needs the package index and takes a few minutes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import re
import subprocess
import sys
import tempfile
import uuid
import venv
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = Path.home() / ".cache" / "awa" / "differential"
AWA_PG = "awa-pg==0.6.9"


def awa_pg_url(url: str, **overrides: str) -> str:
    """``url`` (a URL or a keyword string, with ``overrides`` such as ``dbname``) as a
    URL awa-pg's parser reads: it takes URLs only, and refuses libpq's socket form, a user
    before an empty host and the socket directory in ``?host=``
    (``postgresql://postgres@/app?host=/run/pg``, the embedded test server's) with "empty
    host". The directory goes into the host, percent-encoded
    (``postgresql://postgres@%2Frun%2Fpg/app``), which libpq reads as well.
    """
    params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    params.update(overrides)
    host = params.pop("host", "")
    if host.startswith("/"):
        host = quote(host, safe="")
    user = quote(params.pop("user", ""), safe="")
    password = quote(params.pop("password", ""), safe="")
    port = params.pop("port", "")
    dbname = quote(params.pop("dbname", ""), safe="")
    auth = f"{user}{':' + password if password else ''}@" if user else ""
    netloc = f"{auth}{host}{':' + port if port else ''}"
    return urlunsplit(("postgresql", netloc, f"/{dbname}", urlencode(params), ""))


def awa_pg_python() -> Path:
    """A scratch interpreter with awa-pg 0.6.9, built on first use. Processes and
    threads that ask at once (the test workers, each building its awa-pg template in the
    background) take turns on a file lock; the interpreter counts as built once its
    packages are installed (a marker file), not once it exists."""
    python = CACHE / "awa-pg-0.6.9" / "bin" / "python"
    built = python.parents[1] / ".awa-installed"
    if built.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            _install_awa_pg(python)
            built.touch()
    return python


def _install_awa_pg(python: Path) -> None:
    print(f"installing {AWA_PG} into {python.parents[1]}", file=sys.stderr)
    if not python.exists():
        venv.create(python.parents[1], with_pip=True)
    subprocess.run(
        # awa-pg's awa.testing (the testing_clean scenario) imports pytest-asyncio.
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            AWA_PG,
            "pytest",
            "pytest-asyncio",
        ],
        check=True,
    )


#: The test factory's template of an empty database awa-pg 0.6.9 migrated.
AWA_PG_TEMPLATE = "awa_pg_0_6_9"

# awa-pg's migrate() needs a running event loop when it is called.
_AWA_PG_MIGRATE = (
    "import asyncio, sys, awa\n"
    "async def main():\n"
    "    await awa.migrate(sys.argv[1])\n"
    "asyncio.run(main())\n"
)


def migrate_with_awa_pg(url: str) -> None:
    """Run awa-pg 0.6.9's migrations on the empty database ``url`` (its 40 migrations
    take seconds), installing awa-pg first if needed (:func:`awa_pg_python`)."""
    subprocess.run(
        [str(awa_pg_python()), "-P", "-c", _AWA_PG_MIGRATE, awa_pg_url(url)],
        check=True,
        capture_output=True,
        timeout=300,
    )


def create_database(server_url: str) -> str:
    name = f"awa_diff_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return awa_pg_url(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )


def observe(python: Path, scenario: str, server_url: str) -> dict[str, Any]:
    url = create_database(server_url)
    try:
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run(
                [str(python), "-P", str(HERE / "probe.py"), scenario, url],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=180,
            )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            return {"probe_failed": done.stderr.strip().splitlines()[-3:]}
        observation: dict[str, Any] = json.loads(lines[-1])
        return observation
    finally:
        drop_database(server_url, url)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def compatible(theirs: Any, ours: Any) -> bool:
    """Whether ours keeps what a caller of awa-pg would match on: for an exception, an
    instance of awa-pg's type whose message contains awa-pg's words."""
    if theirs == ours:
        return True
    if not (isinstance(theirs, dict) and isinstance(ours, dict)) or "raised" not in theirs:
        return False
    if "raised" not in ours or theirs["raised"] not in ours.get("is_a", []):
        return False
    words = UUID.sub("<id>", theirs["message"])
    return words in UUID.sub("<id>", ours["message"])


def diff(theirs: dict[str, Any], ours: dict[str, Any]) -> list[tuple[str, Any, Any, bool]]:
    """``(key, theirs, ours, compatible)`` for every key whose observations differ."""
    keys = sorted(set(theirs) | set(ours))
    return [
        (k, theirs.get(k), ours.get(k), compatible(theirs.get(k), ours.get(k)))
        for k in keys
        if theirs.get(k) != ours.get(k)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--report", type=Path)
    parser.add_argument("--awa-pg-python", type=Path)
    parser.add_argument("--server-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    options = parser.parse_args(argv)

    from tests.differential.scenarios import SCENARIOS  # the file the probes load

    theirs_python = options.awa_pg_python or awa_pg_python()
    ours_python = Path(sys.executable)
    names = options.only or list(SCENARIOS)
    lines = [
        "| scenario | key | awa-pg 0.6.9 | this package | compatible |",
        "|---|---|---|---|---|",
    ]
    same = differing = kept = 0
    for name in names:
        theirs = observe(theirs_python, name, options.server_url)
        ours = observe(ours_python, name, options.server_url)
        rows = diff(theirs, ours)
        keys = len(set(theirs) | set(ours))
        differing += sum(not ok for *_, ok in rows)
        kept += sum(ok for *_, ok in rows)
        same += keys - len(rows)
        print(f"{name}: {keys - len(rows)}/{keys} keys match", file=sys.stderr)
        for key, a, b, ok in rows:
            verdict = "yes" if ok else "no"
            lines.append(f"| {name} | {key} | `{json.dumps(a)}` | `{json.dumps(b)}` | {verdict} |")
    summary = (
        f"{same} observations identical, {kept} compatible (awa-pg's exception type and "
        f"words kept), {differing} differ"
    )
    report = "\n".join([summary, "", *lines]) + "\n"
    if options.report:
        options.report.write_text(report, encoding="utf-8")
    print(report)
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
