"""The published artefact works on its own: a wheel built from a clean clone of the
committed tree installs into a fresh virtualenv, and ``awa --help``, ``awa migrate`` and
the quickstart (a producer enqueues, ``awa worker`` runs the handler) work from it.

Slow (it downloads the runtime dependencies into a new venv); run it with
``scripts/test -m slow tests/packaging``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import psycopg
import pytest

import awa
from awa.adapters.postgres_queue_storage import statements as queue_storage_statements

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]

APP = """
import dataclasses
import awa

@dataclasses.dataclass
class Greet:
    name: str

def create_client(database_url):
    client = awa.AsyncClient(database_url)

    @client.task(Greet, queue="greetings")
    def greet(job):
        print(f"hello {job.args.name}", flush=True)

    return client
"""

PRODUCER = """
import sys
import awa
from app import Greet

with awa.Client(sys.argv[1]) as client:
    job = client.insert(Greet("ada"), queue="greetings")
    print(job.id)
"""


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_wheel_from_a_clean_clone(tmp_path: Path, database_url: str) -> None:
    clone = tmp_path / "clone"
    run("git", "clone", "--quiet", "--no-hardlinks", ROOT, clone, cwd=tmp_path)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ".", cwd=clone)
    (wheel,) = dist.glob("awa_py-*.whl")
    assert wheel.name.startswith(f"awa_py-{awa.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    for license_file in ("LICENSE", "LICENSE-MIT", "LICENSE-APACHE"):
        assert any(n.endswith(f"/licenses/{license_file}") for n in names), license_file
    assert any(n.endswith(".sql") for n in names)
    # The queue-storage engine's statements are spread over one file per part: every one
    # ships.
    for filename in queue_storage_statements.FILES:
        assert f"awa/adapters/postgres_queue_storage/{filename}" in names, filename
    assert not any(n.startswith("tests/") for n in names)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python, awa_bin = venv / "bin" / "python", venv / "bin" / "awa"
    run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        wheel,
        cwd=tmp_path,
    )
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    assert "Usage: awa" in run(awa_bin, "--help", cwd=app_dir, env=env)
    version = run(python, "-c", "import awa; print(awa.__version__)", cwd=app_dir, env=env)
    assert version.strip() == awa.__version__

    # The quickstart, against a database that has never seen awa.
    url = database_url
    assert "Applied" in run(awa_bin, "--database-url", url, "migrate", cwd=app_dir, env=env)
    (app_dir / "app.py").write_text(textwrap.dedent(APP))
    (app_dir / "produce.py").write_text(textwrap.dedent(PRODUCER))
    job_id = int(run(python, "produce.py", url, cwd=app_dir, env=env).split()[-1])
    log = app_dir / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [awa_bin, "--database-url", url, "worker", "-m", "app", "-q", "greetings:2"],
            cwd=app_dir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline:
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,))
                found = row.fetchone()
            state = found[0] if found else None
            if state == "completed":
                break
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert state == "completed", log.read_text()
    assert "hello ada" in log.read_text()
