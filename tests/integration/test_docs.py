"""The user docs: the site builds without warnings and every example runs.

Each fenced ``python`` block of ``README.md`` and ``docs/**/*.md`` is a whole program. It
runs in its own interpreter with ``DATABASE_URL`` pointing at a fresh migrated database,
and must exit 0 within a minute. A block whose first line is ``# not run: <reason>`` is
skipped (for fragments of a larger app, such as a Django settings file).

Each fenced ``sh`` / ``bash`` / ``shell`` block runs the same way under ``bash -e -o
pipefail``, with the package's ``awa`` first on ``PATH``. A block that cannot run in a test
(it installs packages, needs a container engine or another host, or serves until it is
stopped) has ``<!-- not run: <reason> -->`` on the line before its fence, visible in the
markdown; the test skips it and counts it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pg import DatabaseFactory

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = "# not run:"
SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->\s*\Z", re.DOTALL)


def _examples() -> Iterator[tuple[str, str]]:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(FENCE.finditer(text), start=1):
            line = text.count("\n", 0, match.start()) + 1
            yield f"{page.relative_to(ROOT)}:{line}#{number}", match.group(1)


EXAMPLES = list(_examples())


def _shell_blocks() -> Iterator[tuple[str, str, str | None]]:
    """(name, code, reason it is not run or None) of every shell block."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(SHELL_FENCE.finditer(text), start=1):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip()
            previous = before.rsplit("\n", 1)[-1]
            marker = SHELL_NOT_RUN.search(previous)
            reason = None if marker is None else marker.group(1).strip()
            yield f"{page.relative_to(ROOT)}:{line}#sh{number}", match.group(1), reason


SHELL_BLOCKS = list(_shell_blocks())


def test_the_docs_have_examples() -> None:
    pages = {name.split(":")[0] for name, _ in EXAMPLES}
    assert "README.md" in pages
    assert len(EXAMPLES) >= 10


@pytest.mark.postgres
@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs(name: str, code: str, pg_databases: DatabaseFactory, tmp_path: Path) -> None:
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    if first.startswith(NOT_RUN):
        reason = first.removeprefix(NOT_RUN).strip()
        assert reason, f"{name}: a skipped example must say why"
        pytest.skip(f"{name}: {reason}")
    from tests.conftest import migrate_template

    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (
            f"{name} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    finally:
        pg_databases.release(url)


def test_shell_blocks_run_or_say_why_not() -> None:
    skipped = [(name, reason) for name, _, reason in SHELL_BLOCKS if reason is not None]
    run = [name for name, _, reason in SHELL_BLOCKS if reason is None]
    for name, reason in skipped:
        assert reason, f"{name}: a block marked not run must say why"
    # The markers are for what a test cannot do; the rest run.
    assert len(run) >= 10, run
    print(f"shell blocks: {len(run)} run, {len(skipped)} not run")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("name", "code", "reason"), SHELL_BLOCKS, ids=[name for name, _, _ in SHELL_BLOCKS]
)
def test_shell_block_runs(
    name: str, code: str, reason: str | None, pg_databases: DatabaseFactory, tmp_path: Path
) -> None:
    if reason is not None:
        pytest.skip(f"{name}: not run: {reason}")
    from tests.conftest import migrate_template

    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "awa").is_file(), "the awa console script is not installed in the venv"
    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PYTHONPATH": str(ROOT),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (
            f"{name} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    finally:
        pg_databases.release(url)


def test_the_site_builds_without_warnings(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: the test command installs the dev extra")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    # The API reference is generated from docstrings, so a docstring shows up there.
    assert "Insert one job." in reference
    # Every field of a Job is documented, and its storage internals are not.
    for field in ("id", "kind", "queue", "state", "attempt", "max_attempts", "errors", "args"):
        assert f'id="awa.Job.{field}"' in reference, field
    assert 'id="awa.Job.record"' not in reference
    # Operator plumbing typed by internal ports stays out of the reference.
    assert 'id="awa.AsyncClient.insert"' in reference
    for internal in ("admin_engine", "admin_control_plane", "schema_admin", "runtime_registry"):
        assert f'id="awa.AsyncClient.{internal}"' not in reference, internal
