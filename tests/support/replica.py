"""A primary and a streaming replica of it, made for a test from Postgres's own tools.

The pair is built in a temporary directory: ``initdb`` makes the primary (with a
``pg_hba.conf`` that lets the replica connect for replication), ``pg_basebackup -R``
copies it into a standby, and both run on free ports of 127.0.0.1. The binaries come from
the machine's Postgres install (``pg_config --bindir`` or ``/usr/lib/postgresql/*/bin``)
or, where there is none, from the ``pgserver`` wheel the embedded test provider uses.
Postgres refuses to run as root, so as root the servers run as the ``postgres`` system
user (or ``pgserver``, which the embedded provider creates).

Nothing here touches the suite's main server: the pair has its own data directories and
ports and is stopped and removed when the fixture ends.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psycopg

#: How long a server gets to start or stop, and the replica to catch up.
STARTUP_TIMEOUT = 30.0


class ReplicaUnavailable(RuntimeError):
    """No Postgres binaries or system user to build a primary and replica with."""


def _bindir() -> Path:
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if found.returncode == 0:
            candidates.append(Path(found.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    try:
        import pgserver

        candidates.append(Path(pgserver.__file__).parent / "pginstall" / "bin")
    except ImportError:
        pass
    for path in candidates:
        if all((path / tool).exists() for tool in ("initdb", "pg_ctl", "pg_basebackup")):
            return path
    raise ReplicaUnavailable("no Postgres install with initdb, pg_ctl and pg_basebackup")


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise ReplicaUnavailable("running as root and no 'postgres' or 'pgserver' system user")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.define
class ServerDir:
    """One server's data directory, port and log."""

    data: Path
    port: int
    log: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


@attrs.define
class ReplicaPair:
    """A running primary and a hot-standby replica streaming from it."""

    primary: ServerDir
    replica: ServerDir
    bindir: Path
    user: str | None
    root: Path

    def _tool(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / name), *args],
            capture_output=True,
            text=True,
            user=self.user,
            cwd=self.root,
            timeout=STARTUP_TIMEOUT,
        )

    def start(self, server: ServerDir) -> None:
        done = self._tool(
            "pg_ctl",
            "-D",
            str(server.data),
            "-l",
            str(server.log),
            "-w",
            "-t",
            str(int(STARTUP_TIMEOUT)),
            "-o",
            f"-p {server.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root}",
            "start",
        )
        if done.returncode != 0:
            log = server.log.read_text() if server.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr}\n{log}")

    def stop(self, server: ServerDir) -> None:
        self._tool("pg_ctl", "-D", str(server.data), "-m", "immediate", "-w", "stop")

    def wait_caught_up(self, database: str = "postgres") -> None:
        """Block until the replica has replayed everything the primary has written."""
        with psycopg.connect(self.primary.url(database), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with psycopg.connect(self.replica.url(database), autocommit=True) as conn:
            while True:
                done = conn.execute(
                    "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0",
                    (target,),
                ).fetchone()
                if done and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replica did not replay up to {target}")
                # Replay is driven by the walreceiver; this short pause polls its progress.
                time.sleep(0.02)

    def wait_replay_behind(self, database: str = "postgres") -> None:
        """Block until the replica has received WAL that it has not replayed (replay paused)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with psycopg.connect(self.replica.url(database), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(),"
                    " pg_last_wal_replay_lsn()) > 0"
                ).fetchone()
                if row and row[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError("the replica received nothing it has not replayed")
                time.sleep(0.02)

    def promote(self) -> None:
        with psycopg.connect(self.replica.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_promote(wait => true)")


@contextmanager
def replica_pair() -> Iterator[ReplicaPair]:
    """Build, start and finally remove a primary with one streaming replica."""
    bindir = _bindir()
    user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="awa-replica-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        root.chmod(0o755)
    primary = ServerDir(root / "primary", _free_port(), root / "primary.log")
    replica = ServerDir(root / "replica", _free_port(), root / "replica.log")
    pair = ReplicaPair(primary, replica, bindir, user, root)
    started: list[ServerDir] = []
    try:
        made = pair._tool(
            "initdb", "-D", str(primary.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed: {made.stderr}")
        with (primary.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\nmax_wal_senders = 4\nfsync = off\n")
        pair.start(primary)
        started.append(primary)
        copied = pair._tool(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(replica.data),
            "-R",
            "-X",
            "stream",
            "--no-sync",
        )
        if copied.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {copied.stderr}")
        pair.start(replica)
        started.append(replica)
        yield pair
    finally:
        for server in reversed(started):
            pair.stop(server)
        shutil.rmtree(root, ignore_errors=True)
