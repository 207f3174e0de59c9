"""A real PgBouncer in transaction mode in front of the test server.

:func:`start_pgbouncer` writes an ini and a userlist into a temporary directory and runs
``pgbouncer`` (Debian's package, ``/usr/sbin/pgbouncer`` or ``$AWA_PGBOUNCER``) in the
foreground on a free port of 127.0.0.1, with ``pool_mode = transaction`` and a small
``default_pool_size``: every server connection is shared between client connections from
one transaction to the next, as in production behind PgBouncer, Supavisor or RDS Proxy.
``auth_type = trust`` against the local server (the test server trusts 127.0.0.1 too).

:class:`PgBouncer` can be stopped and started again on the same port (a pooler restart)
and rewrites a database URL to go through it (:meth:`PgBouncer.url`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: Where Debian's package puts it; ``AWA_PGBOUNCER`` overrides.
DEFAULT_PATH = "/usr/sbin/pgbouncer"
#: Server connections per (database, user): small, so client connections really share.
POOL_SIZE = 4
START_TIMEOUT = 10.0


def pgbouncer_path() -> str | None:
    """The pgbouncer executable, or ``None`` when it is not installed."""
    configured = os.environ.get("AWA_PGBOUNCER", DEFAULT_PATH)
    if os.access(configured, os.X_OK):
        return configured
    return shutil.which("pgbouncer")


def run_as_user(server_host: str, *, euid: int | None = None) -> str | None:
    """The user pgbouncer drops to (``-u``), or ``None`` to run as the caller.

    pgbouncer refuses to run as root. Behind a TCP server it drops to ``nobody``; behind a
    Unix socket (the embedded provider's server listens on one, in its data directory,
    mode 0700 and owned by the server's own user when started as root) ``nobody`` could
    not reach the socket, so it runs as the owner of that directory instead.
    """
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    if server_host.startswith("/"):
        owner = os.stat(server_host).st_uid
        if owner != 0:
            return pwd.getpwuid(owner).pw_name
    return "nobody"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """One pgbouncer process (restartable) in front of ``server_url``'s server."""

    def __init__(self, executable: str, server_url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.executable = executable
        params = conninfo_to_dict(server_url)
        self.server_host = str(params.get("host") or "127.0.0.1")
        self.server_port = int(params.get("port") or 5432)
        self.user = str(params.get("user") or "postgres")
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
        # pgbouncer refuses to run as root: it then drops to another user
        # (:func:`run_as_user`), who must read these.
        self.directory.chmod(0o755)
        self.log_path = self.directory / "pgbouncer.log"
        self._write_config(pool_size)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def _write_config(self, pool_size: int) -> None:
        users = self.directory / "userlist.txt"
        users.write_text(f'"{self.user}" ""\n')
        ini = self.directory / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"admin_users = {self.user}\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 400\n"
            "server_lifetime = 3600\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n"
        )
        for path in (users, ini):
            path.chmod(0o644)
        self.ini = ini

    # ------------------------------------------------------------------ process
    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start pgbouncer and wait until it accepts a client (at most 10 s)."""
        if self.running:
            return
        command = [self.executable, str(self.ini)]
        user = run_as_user(self.server_host)
        if user is not None:
            command[1:1] = ["-u", user]
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if not self.running or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start: {self.log_tail()}") from None
                time.sleep(0.05)

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop pgbouncer (SIGINT: at once, closing every client and server connection;
        SIGKILL: a crash). The port is free again when this returns."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, sig: int = signal.SIGINT) -> None:
        """Stop and start again on the same port."""
        self.stop(sig)
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def release(self, database_url_or_name: str) -> None:
        """Close every connection pgbouncer holds to that database (its admin console's
        ``KILL``, then ``RESUME``), so dropping the database does not wait for them."""
        dbname = conninfo_to_dict(self.url(database_url_or_name)).get("dbname")
        if not self.running or not isinstance(dbname, str):
            return
        admin = make_conninfo(self.url("pgbouncer"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"KILL {dbname}")
            conn.execute(f"RESUME {dbname}")

    # ------------------------------------------------------------------ urls
    def url(self, database_url_or_name: str) -> str:
        """A URL for the same database and user as ``database_url_or_name`` (or for the
        database of that name) through this pgbouncer."""
        if "=" in database_url_or_name or "://" in database_url_or_name:
            params = conninfo_to_dict(database_url_or_name)
            dbname = str(params.get("dbname") or "postgres")
        else:
            dbname = database_url_or_name
        return make_conninfo(host="127.0.0.1", port=str(self.port), user=self.user, dbname=dbname)
