"""The hexagon's import rule, checked on the source: the core never reaches outwards.

``awa.domain``, ``awa.ports`` and ``awa.runtime`` must not import an adapter, an
entrypoint or a database driver; ``awa.domain`` may import only the standard library,
``attrs`` and itself. The routing engine (``awa.adapters.routing``) composes engines it
knows only through ports: it may import the standard library, ``attrs``, the domain, the
ports and itself, so neither a driver nor a concrete engine package.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

AWA_ROOT = Path(__file__).resolve().parents[2] / "awa"
CORE_LAYERS = ("domain", "ports", "runtime")
FORBIDDEN = ("awa.adapters", "awa.entrypoints", "psycopg", "psycopg_pool")
DOMAIN_ALLOWED_THIRD_PARTY = ("attrs", "awa.domain")
ROUTING_PACKAGE = "awa.adapters.routing"
ROUTING_ALLOWED = ("attrs", "awa.domain", "awa.ports", ROUTING_PACKAGE)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """Every module an import statement in ``source`` names, with its line number.

    ``package`` is the dotted package the source lives in (for relative imports).
    ``from a import b`` yields both ``a`` and ``a.b``, since ``b`` may be a submodule.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def violations(source: str, module: str) -> list[str]:
    """Import-rule violations of ``module`` (a dotted name under ``awa``) given its source."""
    parts = module.split(".")
    package = module if parts[-1] == "__init__" else ".".join(parts[:-1])
    package = package.removesuffix(".__init__")
    layer = parts[1] if len(parts) > 1 else ""
    problems: list[str] = []
    for line, name in imported_modules(source, package):
        if any(_within(name, bad) for bad in FORBIDDEN):
            problems.append(f"{module}:{line} imports {name}")
        elif layer == "domain" and not (
            _is_stdlib(name) or any(_within(name, ok) for ok in DOMAIN_ALLOWED_THIRD_PARTY)
        ):
            problems.append(f"{module}:{line} imports {name} (domain: stdlib and attrs only)")
    return sorted(set(problems))


def routing_violations(source: str, module: str) -> list[str]:
    """Imports of a routing-engine module outside the stdlib, attrs, domain and ports."""
    init = module.endswith(".__init__")
    package = module.removesuffix(".__init__") if init else module.rsplit(".", 1)[0]
    return sorted(
        {
            f"{module}:{line} imports {name} (routing: domain and ports only)"
            for line, name in imported_modules(source, package)
            if not (_is_stdlib(name) or any(_within(name, ok) for ok in ROUTING_ALLOWED))
        }
    )


def _modules_under(root: Path) -> list[tuple[str, Path]]:
    return [
        (".".join(("awa", *path.relative_to(AWA_ROOT).with_suffix("").parts)), path)
        for path in sorted(root.rglob("*.py"))
    ]


def core_modules() -> list[tuple[str, Path]]:
    modules: list[tuple[str, Path]] = []
    for layer in CORE_LAYERS:
        modules.extend(_modules_under(AWA_ROOT / layer))
    return modules


def routing_modules() -> list[tuple[str, Path]]:
    return _modules_under(AWA_ROOT / "adapters" / "routing")


def test_core_layers_exist() -> None:
    names = [name for name, _ in core_modules()]
    assert "awa.domain.states" in names
    assert "awa.ports.storage" in names
    assert "awa.runtime.__init__" in names


@pytest.mark.parametrize(("module", "path"), core_modules(), ids=lambda v: str(v))
def test_core_module_respects_the_import_rule(module: str, path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), module) == []


def test_routing_engine_modules_exist() -> None:
    names = [name for name, _ in routing_modules()]
    assert "awa.adapters.routing.engine" in names
    assert "awa.adapters.routing.__init__" in names


@pytest.mark.parametrize(("module", "path"), routing_modules(), ids=lambda v: str(v))
def test_routing_engine_imports_no_driver_and_no_engine(module: str, path: Path) -> None:
    assert routing_violations(path.read_text(encoding="utf-8"), module) == []


# ---------------------------------------------------------------- the checker itself


def test_checker_catches_psycopg_in_the_domain() -> None:
    source = "import psycopg\nfrom attrs import frozen\n"
    assert violations(source, "awa.domain.bad") == ["awa.domain.bad:1 imports psycopg"]


def test_checker_catches_pool_and_adapters_in_ports_and_runtime() -> None:
    source = "from psycopg_pool import AsyncConnectionPool\nfrom awa.adapters import inmemory\n"
    found = violations(source, "awa.runtime.bad")
    assert "awa.runtime.bad:1 imports psycopg_pool" in found
    assert "awa.runtime.bad:2 imports awa.adapters" in found
    assert violations("import awa.entrypoints.cli\n", "awa.ports.bad") == [
        "awa.ports.bad:1 imports awa.entrypoints.cli"
    ]


def test_checker_resolves_relative_imports() -> None:
    assert violations("from ..adapters import clock\n", "awa.runtime.bad") == [
        "awa.runtime.bad:1 imports awa.adapters",
        "awa.runtime.bad:1 imports awa.adapters.clock",
    ]
    assert violations("from . import states\n", "awa.domain.ok") == []
    assert violations("from .states import JobState\n", "awa.domain.__init__") == []


def test_checker_sees_imports_nested_in_functions_and_type_checking_blocks() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import psycopg\n"
        "def f() -> None:\n"
        "    from awa.entrypoints import cli\n"
    )
    found = violations(source, "awa.ports.bad")
    assert "awa.ports.bad:3 imports psycopg" in found
    assert "awa.ports.bad:5 imports awa.entrypoints" in found


def test_domain_allows_only_stdlib_attrs_and_itself() -> None:
    ok = "import json\nimport attrs\nfrom awa.domain.states import JobState\n"
    assert violations(ok, "awa.domain.fine") == []
    assert violations("import anyio\n", "awa.domain.bad") == [
        "awa.domain.bad:1 imports anyio (domain: stdlib and attrs only)"
    ]
    assert violations("from awa.ports import Clock\n", "awa.domain.bad") != []


def test_runtime_may_use_anyio_ports_and_domain() -> None:
    source = "import anyio\nfrom awa.ports import StorageEngine\nfrom awa.domain import JobState\n"
    assert violations(source, "awa.runtime.fine") == []


def test_names_that_merely_share_a_prefix_are_not_flagged() -> None:
    assert violations("import psycopgx\n", "awa.ports.fine") == []


def test_routing_checker_catches_drivers_and_engine_packages() -> None:
    source = (
        "import psycopg\n"
        "from psycopg_pool import AsyncConnectionPool\n"
        "from awa.adapters.postgres_queue_storage import QueueStorageEngine\n"
        "from awa.adapters.postgres_canonical.base import CanonicalUnitOfWork\n"
        "from awa.adapters._pg import transition\n"
        "from awa.adapters.inmemory import InMemoryEngine\n"
        "from awa.entrypoints import bootstrap\n"
    )
    found = routing_violations(source, "awa.adapters.routing.bad")
    for line, name in enumerate(
        [
            "psycopg",
            "psycopg_pool",
            "awa.adapters.postgres_queue_storage",
            "awa.adapters.postgres_canonical.base",
            "awa.adapters._pg",
            "awa.adapters.inmemory",
            "awa.entrypoints",
        ],
        start=1,
    ):
        assert (
            f"awa.adapters.routing.bad:{line} imports {name} (routing: domain and ports only)"
            in found
        )


def test_routing_may_use_domain_ports_and_its_own_modules() -> None:
    source = (
        "import asyncio\nimport attrs\nfrom awa.domain.job import JobSpec\n"
        "from awa.ports.routing import HomeEngine\nfrom .base import RoutingBase\n"
    )
    assert routing_violations(source, "awa.adapters.routing.fine") == []
    assert routing_violations("from . import base\n", "awa.adapters.routing.__init__") == []
