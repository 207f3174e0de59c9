"""Awa's ``django.tasks`` backend (``awa.contrib.django``, ADR 0036) under a real Django 6
project: ``tests/django_project``'s own test suite runs with ``manage.py test`` against a
migrated database, and ``manage.py awa_migrate`` migrates an empty one.

Django 6 needs Python 3.12 or later and the project's virtualenv may be older, so the
suite runs in a second virtualenv, ``.venv-django``, holding Django from the package
index and this project (``pip install -e .[django]``), built by
``tests/support/django_venv.py`` (once, and in the background as soon as these tests are
collected). ``$AWA_DJANGO_PYTHON`` names the interpreter; otherwise the first Python
3.12+ found on ``PATH`` or under pyenv is used, and without one the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from awa.entrypoints import bootstrap
from tests.support.django_venv import ROOT, ensure_venv, find_python
from tests.support.pg import DatabaseFactory

PROJECT = ROOT / "tests" / "django_project"
#: How many tests the project's suite holds; fewer means some were lost.
EXPECTED_TESTS = 21
#: The docs page whose Django 6 examples this test runs (``test_docs`` cannot: its
#: interpreter may be older), and the marker they carry on their first line.
DOCS_PAGE = ROOT / "docs" / "django.md"
DOCS_MARKER = "tests/integration/test_django_tasks.py runs it"

pytestmark = pytest.mark.postgres


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


def test_awa_migrate_gives_an_empty_database_the_schema(
    database_url: str, installed_database_url: str
) -> None:
    """An empty database, given Awa's schema as a user would: through the Django settings;
    it ends as the database the project's suite runs on."""
    interpreter = ensure_venv(_python_or_skip())
    migrated = subprocess.run(
        [str(interpreter), "manage.py", "awa_migrate"],
        cwd=PROJECT,
        env=_env(database_url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Awa's schema is up to date." in migrated.stdout
    assert _install_state(database_url) == _install_state(installed_database_url)


def _install_state(url: str) -> tuple[object, ...]:
    with psycopg.connect(url) as conn:
        versions = conn.execute("SELECT version FROM awa.schema_version ORDER BY 1").fetchall()
        storage = conn.execute(
            "SELECT current_engine, active_engine, prepared_engine, state"
            " FROM awa.storage_transition_state"
        ).fetchall()
    assert versions
    return (versions, storage)


def _install(url: str) -> None:
    asyncio.run(bootstrap.migrate(url))


@pytest.fixture
def installed_database_url(pg_databases: DatabaseFactory) -> Iterator[str]:
    """A database given Awa's schema as ``awa_migrate`` gives it (``bootstrap.migrate``:
    the migrations, then queue storage on a fresh database)."""
    url = pg_databases.create(pg_databases.template("installed", _install))
    try:
        yield url
    finally:
        pg_databases.release(url)


#: The project's test classes in two runs of ``manage.py test``, each a test here (a
#: run starts its own workers, so each stays well under the slowest a test may take).
SUITE_PARTS = {
    "results": ("EnqueueAndResults", "Statuses"),
    "rest": (
        "BackendFlags",
        "Configuration",
        "PriorityAndDeferral",
        "Transactions",
        "ValidateTask",
    ),
}


def _project_tests() -> dict[str, int]:
    """Each test class of the project's ``tasksapp/tests.py`` with its number of tests."""
    counts: dict[str, int] = {}
    current: str | None = None
    for line in (PROJECT / "tasksapp" / "tests.py").read_text(encoding="utf-8").splitlines():
        if found := re.match(r"class (\w+)\(\w*TestCase\):", line):
            current = found.group(1)
            counts[current] = 0
        elif current is not None and re.match(r"    (async )?def test_", line):
            counts[current] += 1
    return counts


def test_the_suite_parts_hold_every_project_test() -> None:
    counts = _project_tests()
    parted = [name for names in SUITE_PARTS.values() for name in names]
    assert sorted(parted) == sorted(counts)
    assert sum(counts.values()) == EXPECTED_TESTS


@pytest.mark.parametrize("part", sorted(SUITE_PARTS))
def test_the_django_project_suite_passes(installed_database_url: str, part: str) -> None:
    interpreter = ensure_venv(_python_or_skip())
    env = _env(installed_database_url)
    labels = [f"tasksapp.tests.{name}" for name in SUITE_PARTS[part]]
    run = subprocess.run(
        [str(interpreter), "manage.py", "test", "--keepdb", "--noinput", "-v", "2", *labels],
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
    counts = _project_tests()
    assert int(ran.group(1)) == sum(counts[name] for name in SUITE_PARTS[part]), report
    assert re.search(r"^OK$", run.stderr, re.MULTILINE), report  # no skips, no failures
