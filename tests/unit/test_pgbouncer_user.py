"""Which user the test suite's pgbouncer runs as (tests/support/pgbouncer.py).

As root, pgbouncer must drop to another user; that user has to reach the server. The
embedded provider's server listens on a Unix socket inside its 0700 data directory, so
``nobody`` cannot connect there (``sbuf_connect failed: Permission denied``).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from tests.support.pgbouncer import run_as_user


def test_not_root_runs_as_the_caller() -> None:
    assert run_as_user("127.0.0.1", euid=1000) is None
    assert run_as_user("/some/socket/dir", euid=1000) is None


def test_root_behind_tcp_drops_to_nobody() -> None:
    assert run_as_user("127.0.0.1", euid=0) == "nobody"
    assert run_as_user("db.example.com", euid=0) == "nobody"


def test_root_behind_a_socket_runs_as_the_owner_of_its_directory(tmp_path: Path) -> None:
    socket_dir = tmp_path / "pgdata"
    socket_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        # Root owns what it creates: hand the directory to a user other than root and
        # nobody (uid 1, "daemon" on Debian), as pgserver hands its data directory to its own.
        os.chown(socket_dir, 1, -1)
    owner = pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name
    assert owner not in ("root", "nobody")
    assert run_as_user(str(socket_dir), euid=0) == owner


def test_root_behind_a_root_owned_socket_directory_drops_to_nobody(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        assert run_as_user(str(tmp_path), euid=0) == "nobody"
    else:
        assert run_as_user(str(tmp_path), euid=0) == pwd.getpwuid(os.geteuid()).pw_name
