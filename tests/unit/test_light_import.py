"""``import awa`` is light: no CEL library, no driver, no runtime until a client name is
used; CEL is imported only where an expression is checked or evaluated, and without the
``cel`` extra an expression fails with the install command (ADR 0018)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import awa
from awa.entrypoints import cel


def _fresh(code: str) -> dict[str, bool]:
    """Run ``code`` in a new interpreter; it prints a JSON object."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result: dict[str, bool] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_import_awa_loads_neither_cel_nor_the_driver() -> None:
    seen = _fresh(
        "import json, sys\n"
        "import awa\n"
        "heavy = {m: m in sys.modules for m in ('celpy', 'psycopg', 'anyio', 'awa.runtime')}\n"
        "print(json.dumps(heavy))\n"
    )
    assert seen == {"celpy": False, "psycopg": False, "anyio": False, "awa.runtime": False}


def test_a_client_with_handlers_and_callbacks_without_expressions_needs_no_cel() -> None:
    seen = _fresh(
        "import dataclasses, json, sys\n"
        "import awa, awa.testing\n"
        "from awa.entrypoints.cel import compile_expressions\n"
        "@dataclasses.dataclass\n"
        "class Ping:\n"
        "    n: int\n"
        "client = awa.AsyncClient('postgresql://localhost/app')\n"
        "@client.task(Ping)\n"
        "async def ping(job: awa.Job[Ping]) -> None: ...\n"
        "awa.testing.memory_client(handlers_from=client)\n"
        "assert compile_expressions().is_empty\n"
        "print(json.dumps({'celpy': 'celpy' in sys.modules}))\n"
    )
    assert seen == {"celpy": False}


def test_an_expression_without_the_cel_extra_names_the_install_command() -> None:
    seen = _fresh(
        "import json, sys\n"
        "sys.modules['celpy'] = None  # as if cel-python were not installed\n"
        "import awa\n"
        "from awa.entrypoints import cel\n"
        "try:\n"
        "    cel.compile_expressions(filter='payload.ok == true')\n"
        "except awa.AwaError as exc:\n"
        "    print(json.dumps({'refused': \"pip install 'awa-py[cel]'\" in str(exc)}))\n"
    )
    assert seen == {"refused": True}


def test_with_the_extra_expressions_are_checked_and_evaluated() -> None:
    pytest.importorskip("celpy")
    assert cel.matches("payload.ok == true", {"ok": True})
    with pytest.raises(awa.ValidationError, match="undeclared variable"):
        cel.compile_expressions(filter="other == 1")


def test_every_public_name_resolves() -> None:
    for name in awa.__all__:
        assert getattr(awa, name) is not None, name
    assert set(awa.__all__) <= set(dir(awa))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = awa.nope
