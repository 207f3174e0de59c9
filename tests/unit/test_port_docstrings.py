"""Every method of every port states its semantics: a port's docstrings are its contract
(the contract suite is their executable form), so a method without one is a gap."""

from __future__ import annotations

import ast
from pathlib import Path

import awa.ports

PORTS_DIR = Path(awa.ports.__file__).parent


def _undocumented() -> list[str]:
    missing = []
    for path in sorted(PORTS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if (
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    and not item.name.startswith("_")
                    and ast.get_docstring(item) is None
                ):
                    missing.append(f"{path.name}: {node.name}.{item.name}")
    return missing


def test_every_port_method_has_a_docstring() -> None:
    assert _undocumented() == []


def test_the_scan_finds_the_ports() -> None:
    names = {path.stem for path in PORTS_DIR.glob("*.py")}
    assert {"storage", "batch_ops", "cron", "overrides", "descriptors"} <= names
