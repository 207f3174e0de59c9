"""The queue-storage engine is a façade over parts: every module imports only the parts
ADR 0006 ("Shape of the engine") lets it call."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from awa.adapters import postgres_queue_storage

PACKAGE = "awa.adapters.postgres_queue_storage"
PACKAGE_DIR = Path(postgres_queue_storage.__file__).parent

_VALUES = {"snapshots"}
#: Module -> the engine modules it may import (values in ``snapshots`` are open to all
#: but the lowest layer).
ALLOWED: dict[str, set[str]] = {
    "statements": set(),
    "connections": set(),
    "receipts": set(),
    "snapshots": set(),
    "lanes": {"statements"},
    "facts": {"statements", "lanes"},
    "wakes": {"connections", "statements"},
    "group_commit": {"connections"},
    "swap": {"connections", "statements"},
    "carry": {"statements"},
    "long_tx": {"connections", "statements"},
    "enqueue": {"connections", "statements", "lanes", "facts", "group_commit", "wakes"},
    "copy": {"connections", "statements", "lanes", "facts"},
    "claim": {"connections", "statements", "facts", "receipts"},
    "finalize": {"connections", "statements", "facts", "receipts", "outcomes"},
    "outcomes": {"connections", "statements", "facts", "receipts", "admin_changes"},
    "callbacks": {"connections", "statements", "facts", "outcomes"},
    "sweeps": {"connections", "statements", "facts", "outcomes"},
    "ring": {"connections", "statements", "facts", "swap", "carry", "long_tx"},
    "lease_ring": {"connections", "statements", "swap", "carry"},
    "admin": {"connections", "statements", "facts"},
    "admin_changes": {"connections", "statements", "facts", "lanes"},
    "dlq": {"connections", "statements", "facts", "admin_changes"},
    "batch": {"connections", "statements", "facts", "admin_changes"},
    "install": {"statements"},
    "engine": {"install", "parts", "ring"},
    "__init__": {"engine", "install"},
}
_LOWEST = {"statements", "connections", "receipts", "snapshots"}


def engine_imports(path: Path) -> set[str]:
    """The engine modules ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith(PACKAGE + "."):
                found.add(node.module.removeprefix(PACKAGE + ".").split(".")[0])
            elif node.module == PACKAGE:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.removeprefix(PACKAGE + ".").split(".")[0]
                for alias in node.names
                if alias.name.startswith(PACKAGE + ".")
            )
    return found


def test_every_module_is_listed() -> None:
    modules = {path.stem for path in PACKAGE_DIR.glob("*.py")} - {"parts"}
    assert modules == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_a_module_imports_only_the_parts_it_may_call(module: str) -> None:
    allowed = ALLOWED[module] | (set() if module in _LOWEST else _VALUES)
    assert engine_imports(PACKAGE_DIR / f"{module}.py") <= allowed


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    path = tmp_path / "claim.py"
    path.write_text(f"from {PACKAGE}.enqueue import Enqueue\nfrom {PACKAGE} import ring\n")
    assert engine_imports(path) == {"enqueue", "ring"}
