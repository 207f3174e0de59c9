"""Awa's ``django.tasks`` backend (``awa.contrib.django``, ADR 0036) under a real Django 6
project: ``tests/django_project``'s own test suite runs with ``manage.py test`` against a
database this test creates and migrates (with ``manage.py awa_migrate``).

Django 6 needs Python 3.12 or later and the project's virtualenv may be older, so the
suite runs in a second virtualenv, ``.venv-django``, holding Django from the package
index and this project (``pip install -e .[django]``). It is built once and rebuilt only
when ``pyproject.toml``, the interpreter or the requirement changes (a stamp file holds
their hash, as ``scripts/_venv.sh`` does for ``.venv``). ``$AWA_DJANGO_PYTHON`` names the
interpreter; otherwise the first Python 3.12+ found on ``PATH`` or under pyenv is used,
and without one the test skips, saying so.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "django_project"
VENV = ROOT / ".venv-django"
STAMP = VENV / ".awa-django-stamp"
#: How many tests the project's suite holds; fewer ran means some were not found.
EXPECTED_TESTS = 21
#: The docs page whose Django 6 examples this test runs (``test_docs`` cannot: its
#: interpreter may be older), and the marker they carry on their first line.
DOCS_PAGE = ROOT / "docs" / "django.md"
DOCS_MARKER = "tests/integration/test_django_tasks.py runs it"

pytestmark = pytest.mark.postgres


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (int(out[0]), int(out[1])) if len(out) == 2 else None


def find_python() -> str | None:
    """A Python >= 3.12 interpreter: ``$AWA_DJANGO_PYTHON``, this one, one on ``PATH``
    (``python3.12`` and later), or one pyenv installed."""
    candidates: list[str] = []
    if os.environ.get("AWA_DJANGO_PYTHON"):
        candidates.append(os.environ["AWA_DJANGO_PYTHON"])
    candidates.append(sys.executable)
    for minor in range(20, 11, -1):
        found = shutil.which(f"python3.{minor}")
        if found:
            candidates.append(found)
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.1[2-9]*/bin/python3"), reverse=True)
    for python in candidates:
        version = _version(python)
        if version is not None and version >= (3, 12):
            return python
    return None


def _wanted(python: str) -> str:
    digest = hashlib.sha256()
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(os.path.realpath(python).encode())
    digest.update(subprocess.run([python, "-VV"], capture_output=True, check=True).stdout)
    return digest.hexdigest()


def ensure_venv(python: str) -> Path:
    """``.venv-django``'s interpreter, (re)building the virtualenv when its stamp is stale.
    A lock file keeps two test processes from building it at once."""
    VENV.parent.mkdir(exist_ok=True)
    with open(ROOT / ".venv-django.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        want = _wanted(python)
        interpreter = VENV / "bin" / "python"
        if STAMP.exists() and STAMP.read_text() == want and interpreter.exists():
            return interpreter
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(VENV)], check=True, timeout=300)
        log = VENV / ".awa-install.log"
        with open(log, "w") as out:
            installed = subprocess.run(
                [str(interpreter), "-m", "pip", "install", "-e", f"{ROOT}[django]"],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=900,
            )
        if installed.returncode != 0:
            raise AssertionError(
                f"installing the project with Django into {VENV} failed; see {log}:\n"
                + log.read_text()[-3000:]
            )
        STAMP.write_text(want)
        return interpreter


def _python_or_skip() -> str:
    python = find_python()
    if python is None:
        pytest.skip(
            "Django 6 needs Python >= 3.12 and none was found (set $AWA_DJANGO_PYTHON, "
            "or put python3.12 on PATH)"
        )
    return python


def _env(database_url: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")
    }
    env["AWA_DJANGO_DATABASE_URL"] = database_url
    env["DATABASE_URL"] = database_url
    return env


def docs_examples() -> list[str]:
    """The python blocks of ``docs/django.md`` marked as run here."""
    text = DOCS_PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [block for block in blocks if DOCS_MARKER in block.split("\n", 1)[0]]


def test_the_docs_example_runs(migrated_database_url: str, tmp_path: Path) -> None:
    examples = docs_examples()
    assert examples, f"no example of {DOCS_PAGE.name} is marked {DOCS_MARKER!r}"
    interpreter = ensure_venv(_python_or_skip())
    for number, code in enumerate(examples, start=1):
        script = tmp_path / f"example_{number}.py"
        script.write_text(code, encoding="utf-8")
        run = subprocess.run(
            [str(interpreter), str(script)],
            cwd=tmp_path,
            env=_env(migrated_database_url),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, f"example {number}:\n{run.stdout}\n{run.stderr}"
        assert "finished:" in run.stdout, run.stdout


def test_the_django_project_suite_passes(database_url: str) -> None:
    interpreter = ensure_venv(_python_or_skip())
    env = _env(database_url)
    # An empty database, given Awa's schema as a user would: through the Django settings.
    migrated = subprocess.run(
        [str(interpreter), "manage.py", "awa_migrate"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Awa's schema is up to date." in migrated.stdout
    run = subprocess.run(
        [str(interpreter), "manage.py", "test", "--keepdb", "--noinput", "-v", "2"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.returncode == 0, report
    ran = re.search(r"^Ran (\d+) tests?", run.stderr, re.MULTILINE)
    assert ran is not None, report
    assert int(ran.group(1)) >= EXPECTED_TESTS, report
    assert re.search(r"^OK$", run.stderr, re.MULTILINE), report  # no skips, no failures
