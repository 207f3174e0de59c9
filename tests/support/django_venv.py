"""``.venv-django``: the second virtualenv the Django 6 tests run in
(``tests/integration/test_django_tasks.py``), holding Django from the package index and
this project (``pip install -e .[django]``).

It is rebuilt only when what it installs changes: the interpreter, or the parts of
``pyproject.toml`` that decide what pip installs (the dependencies, the ``django`` extra,
the entry points); a stamp file holds their hash, as ``scripts/_venv.sh`` does for
``.venv``. The project itself is installed editable, so a change to its code needs no
rebuild. A build takes a minute on a fresh machine, so :func:`build_in_background` starts
it as soon as those tests are collected, and the tests find it ready.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-django"
STAMP = VENV / ".awa-django-stamp"


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
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installs = {
        key: project.get(key)
        for key in ("requires-python", "dependencies", "scripts", "entry-points")
    }
    installs["django"] = project.get("optional-dependencies", {}).get("django")
    digest = hashlib.sha256()
    digest.update(json.dumps(installs, sort_keys=True).encode())
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


_started = threading.Lock()
_builder: threading.Thread | None = None


def build_in_background() -> None:
    """Start building (or checking) the virtualenv on a thread of this process, once; the
    tests' own :func:`ensure_venv` waits for it through the lock file."""
    global _builder
    with _started:
        if _builder is not None:
            return
        python = find_python()
        if python is None:
            return
        _builder = threading.Thread(
            target=_build_quietly, args=(python,), name="awa-django-venv", daemon=True
        )
        _builder.start()


def _build_quietly(python: str) -> None:
    # On failure the test's own ensure_venv() builds again and reports why.
    with contextlib.suppress(Exception):
        ensure_venv(python)
