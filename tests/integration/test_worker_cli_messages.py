"""What ``awa worker`` says is true: the database it works on is the one it names, and an
error in the user's module points at the user's line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from awa.entrypoints.cli import cli

BROKEN = """
import awa

def ratio(a: int, b: int) -> float:
    return a / b

RATE = ratio(1, 0)
"""

MODULE_CLIENT = """
import dataclasses
import awa

@dataclasses.dataclass
class Ping:
    n: int

client = awa.AsyncClient({url!r})

@client.task(Ping)
async def ping(job: awa.Job[Ping]) -> None:
    pass
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("AWA_CONTEXT", raising=False)
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fd_worker_")]:
        del sys.modules[name]


def test_an_error_importing_the_module_names_the_users_line(app_dir: Path) -> None:
    (app_dir / "fd_worker_broken.py").write_text(BROKEN)
    result = CliRunner().invoke(cli, ["worker", "-m", "fd_worker_broken"])
    assert result.exit_code == 1
    err = result.stderr
    assert (
        "awa: error: importing module 'fd_worker_broken' failed: "
        "ZeroDivisionError: division by zero" in err
    )
    # The deepest frame of the user's code, with its source line.
    assert f'File "{app_dir / "fd_worker_broken.py"}", line 5, in ratio' in err
    assert "return a / b" in err
    assert "--debug" in err


def test_a_module_client_for_another_database_is_refused(app_dir: Path) -> None:
    module_url = "postgresql://app@db.internal:5432/production"
    (app_dir / "fd_worker_other.py").write_text(MODULE_CLIENT.format(url=module_url))
    target = "postgresql://postgres@127.0.0.1:1/staging"
    result = CliRunner().invoke(cli, ["--database-url", target, "worker", "-m", "fd_worker_other"])
    assert result.exit_code == 1, result.output
    assert (
        "fd_worker_other.client connects to postgresql://app@db.internal:5432/production, "
        "but this command's target is postgresql://postgres@127.0.0.1:1/staging"
    ) in result.stderr
    assert "define create_client(database_url)" in result.stderr


def test_a_module_client_for_the_target_database_is_used(app_dir: Path) -> None:
    # Same database written another way: accepted, and the worker goes on to connect.
    (app_dir / "fd_worker_same.py").write_text(
        MODULE_CLIENT.format(url="postgresql://postgres@127.0.0.1:1/staging")
    )
    target = "host=127.0.0.1 port=1 user=postgres dbname=staging"
    result = CliRunner().invoke(cli, ["--database-url", target, "worker", "-m", "fd_worker_same"])
    assert result.exit_code == 1, result.output
    assert "connects to" not in result.stderr
    assert "could not connect to the database" in result.stderr
