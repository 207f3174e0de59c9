"""The embedded Postgres of ``awa dev``: started for one run, stopped on every way out.

A run without a database URL starts a ``pgserver`` server in a data directory. The server
is stopped, and a temporary data directory removed, when the run ends, fails, or is
stopped by SIGINT, SIGTERM or SIGHUP (a closed terminal). A run killed outright (SIGKILL,
a power cut) cannot clean up after itself, so each run first reaps what an earlier one
left: temporary directories whose owner process is gone (their server is stopped and the
directory removed) and, in a kept data directory, a server no live process uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from awa.adapters._pg import databases as pg_databases

EMBEDDED_MISSING = (
    "no database URL and the embedded Postgres is not installed; "
    "set DATABASE_URL or install pgserver (pip install 'awa-py[embedded]')"
)

#: Temporary data directories are ``<tmp>/awa-dev-XXXX``; this file in one names its
#: owner process.
SCRATCH_PREFIX = "awa-dev-"
OWNER_FILE = "owner.pid"
#: pgserver's record of the processes using a data directory's server.
_HANDLES_FILE = ".handle_pids.json"
#: How long a leftover server gets to stop after SIGINT (fast shutdown) before SIGKILL.
_STOP_WAIT = 10.0
#: The signals a terminal or a supervisor sends to stop a program.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by ``signum``; raised in the main thread so every ``finally``
    (the worker's shutdown, the server's stop) runs on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into :class:`Interrupted`; once one arrived, later
    ones are ignored so they cannot cut the clean-up short."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def stop(signum: int, frame: FrameType | None) -> None:
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def default_data_dir() -> Path | None:
    """Where the embedded server keeps its data between runs; ``None`` means "a fresh
    temporary directory" (when running as root, or when the cache is not writable)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return None
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(cache) / "awa" / "dev-postgres"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):
        return None


def stop_server(pgdata: Path) -> bool:
    """Stop the server running on ``pgdata``, if any (fast shutdown, then SIGKILL);
    whether one was running."""
    pid = _postmaster_pid(pgdata)
    if pid is None or not _alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + _STOP_WAIT
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True


def _owner(scratch: Path) -> int | None:
    try:
        return int((scratch / OWNER_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def reap_leftovers(data_dir: Path | None, out: TextIO) -> None:
    """Stop and remove what earlier runs killed outright left behind: every temporary
    data directory whose owner (named in its ``owner.pid``) is gone and, in the kept
    ``data_dir``, a server that no live process uses (pgserver would otherwise keep it
    running for the dead one)."""
    for scratch in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        if not scratch.is_dir():
            continue
        owner = _owner(scratch)
        # Only directories a run marked as its own; a live owner is still using its one.
        if owner is None or _alive(owner):
            continue
        stopped = stop_server(scratch / "pgdata")
        shutil.rmtree(scratch, ignore_errors=True)
        _say(
            out,
            f"removed {scratch} left by an earlier run"
            + (" (its server was still running: stopped)" if stopped else ""),
        )
    if data_dir is not None:
        _forget_dead_handles(data_dir, out)


def _forget_dead_handles(pgdata: Path, out: TextIO) -> None:
    handles = pgdata / _HANDLES_FILE
    try:
        pids = [int(p) for p in json.loads(handles.read_text())]
    except (OSError, ValueError, TypeError):
        return
    live = [p for p in pids if _alive(p)]
    if live == pids:
        return
    if not live and stop_server(pgdata):
        _say(out, f"stopped the embedded Postgres in {pgdata} left running by an earlier run")
    handles.write_text(json.dumps(live))


def _say(out: TextIO, line: str) -> None:
    # A closed terminal (SIGHUP) must not stop the clean-up half way.
    with contextlib.suppress(OSError, ValueError):
        out.write(line + "\n")
        out.flush()


@contextlib.contextmanager
def embedded_postgres(data_dir: Path | None, out: TextIO) -> Iterator[str]:
    """Start (or reuse) an embedded server, yield the URL of a fresh database in it, then
    drop that database and stop the server; a temporary data directory (``data_dir``
    ``None``) is removed."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; harmless.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            from pgserver.postgres_server import get_server
    except ImportError as exc:
        raise RuntimeError(EMBEDDED_MISSING) from exc

    reap_leftovers(data_dir, out)
    scratch: Path | None = None
    if data_dir is None:
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        (scratch / OWNER_FILE).write_text(str(os.getpid()))
        data_dir = scratch / "pgdata"
    server: Any = None
    try:
        _say(out, f"starting embedded Postgres in {data_dir}...")
        server = get_server(data_dir, cleanup_mode="stop")
        dbname = f"awa_dev_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        admin_url = str(server.get_uri())
        pg_databases.create_database_sync(admin_url, dbname)
        try:
            yield str(server.get_uri(dbname))
        finally:
            with contextlib.suppress(Exception):
                pg_databases.drop_database_sync(admin_url, dbname)
    finally:
        if server is not None:
            server.cleanup()
        if scratch is not None:
            # A server pgserver did not stop must not outlive its removed directory.
            stop_server(data_dir)
            shutil.rmtree(scratch, ignore_errors=True)
        _say(out, "embedded Postgres stopped" + (f" and {scratch} removed" if scratch else ""))
