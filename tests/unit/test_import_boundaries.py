"""The hexagon's import rule, checked on the source: the core never reaches outwards,
and the entrypoints reach the database only through adapters.

``awa.domain``, ``awa.ports`` and ``awa.runtime`` must not import an adapter, an
entrypoint or a database driver; ``awa.domain`` may import only the standard library,
``attrs`` and itself. The routing engine (``awa.adapters.routing``) composes engines it
knows only through ports: it may import the standard library, ``attrs``, the domain, the
ports and itself, so neither a driver nor a concrete engine package.

The entrypoints (``awa.entrypoints`` and the public top-level modules) hold no SQL: no
string constant in them reads as a statement, and only the modules listed in
:data:`DRIVER_ALLOWED` (with the reason) import a database driver. Their reads and writes
go through ports (``awa.ports``) and the adapters that implement them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

AWA_ROOT = Path(__file__).resolve().parents[2] / "awa"
CORE_LAYERS = ("domain", "ports", "runtime")
FORBIDDEN = ("awa.adapters", "awa.entrypoints", "psycopg", "psycopg_pool")
DOMAIN_ALLOWED_THIRD_PARTY = ("attrs", "awa.domain")
ROUTING_PACKAGE = "awa.adapters.routing"
ROUTING_ALLOWED = ("attrs", "awa.domain", "awa.ports", ROUTING_PACKAGE)


#: Database drivers and toolkits whose SQL lives in the adapters layer.
DRIVERS = ("psycopg", "psycopg_pool", "asyncpg", "sqlalchemy", "django")
#: Entrypoint modules that may import a driver, and why.
DRIVER_ALLOWED = {
    "awa.entrypoints.bootstrap": (
        "composition root: it types the pool and connections it hands to the client and "
        "checks, synchronously, that the database answers before a client is built"
    ),
}
#: Top-level modules that are entrypoints too (the public API surface).
TOP_LEVEL_ENTRYPOINTS = ("__init__", "__main__", "_awa", "bridge")

#: A string constant that reads as SQL. Keywords are matched in upper case, as every
#: statement of this package writes them, so prose that merely uses the words passes.
SQL_LITERAL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b"
    r"|\bSELECT\s+(?:\d|\*|\w+\s*\()"
    r"|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b|\bDELETE\s+FROM\b|\bTRUNCATE\b"
    r"|\b(?:CREATE|DROP|ALTER)\s+(?:TABLE|DATABASE|SCHEMA|INDEX|FUNCTION|VIEW|TYPE|TRIGGER)\b"
    r"|\bpg_notify\s*\("
    r"|^\s*(?:BEGIN|COMMIT|ROLLBACK|LISTEN|NOTIFY|SET|VACUUM|ANALYZE)\b"
)
#: String constants in entrypoints that look like SQL but are not statements, and why.
#: (Empty: add ``(module, fragment): reason`` only for a genuine false positive.)
SQL_LITERAL_ALLOWED: dict[tuple[str, str], str] = {}


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


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(source: str) -> list[tuple[int, str]]:
    """String and bytes constants in ``source`` (docstrings aside, f-string parts
    included) that read as SQL, with their line numbers."""
    tree = ast.parse(source)
    docstrings = _docstring_nodes(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings:
            continue
        value = node.value
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if isinstance(text, str) and SQL_LITERAL.search(text):
            found.append((node.lineno, text))
    return found


def entrypoint_violations(source: str, module: str) -> list[str]:
    """Driver imports outside :data:`DRIVER_ALLOWED` and SQL literals in the entrypoint
    ``module``."""
    parts = module.split(".")
    package = ".".join(parts[:-1])
    problems: list[str] = []
    if module not in DRIVER_ALLOWED:
        for line, name in imported_modules(source, package):
            if any(_within(name, driver) for driver in DRIVERS):
                problems.append(f"{module}:{line} imports {name}")
    for line, text in sql_literals(source):
        allowed = any(mod == module and fragment in text for (mod, fragment) in SQL_LITERAL_ALLOWED)
        if not allowed:
            problems.append(f"{module}:{line} holds SQL {text.strip()[:60]!r}")
    return sorted(set(problems))


def _dotted(path: Path) -> str:
    return ".".join(("awa", *path.relative_to(AWA_ROOT).with_suffix("").parts))


def entrypoint_modules() -> list[tuple[str, Path]]:
    paths = sorted((AWA_ROOT / "entrypoints").rglob("*.py"))
    paths += [AWA_ROOT / f"{name}.py" for name in TOP_LEVEL_ENTRYPOINTS]
    return [(_dotted(path), path) for path in paths]


def core_modules() -> list[tuple[str, Path]]:
    modules: list[tuple[str, Path]] = []
    for layer in CORE_LAYERS:
        for path in sorted((AWA_ROOT / layer).rglob("*.py")):
            dotted = ".".join(("awa", *path.relative_to(AWA_ROOT).with_suffix("").parts))
            modules.append((dotted, path))
    return modules


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


def routing_modules() -> list[tuple[str, Path]]:
    paths = sorted((AWA_ROOT / "adapters" / "routing").rglob("*.py"))
    return [(_dotted(path), path) for path in paths]


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


def test_entrypoints_exist_and_the_allowances_name_real_modules() -> None:
    names = {name for name, _ in entrypoint_modules()}
    assert {"awa.entrypoints.bootstrap", "awa.entrypoints.cli.storage", "awa.bridge"} <= names
    assert set(DRIVER_ALLOWED) <= names
    assert {module for module, _ in SQL_LITERAL_ALLOWED} <= names


@pytest.mark.parametrize(("module", "path"), entrypoint_modules(), ids=lambda v: str(v))
def test_entrypoint_holds_no_sql_and_imports_no_driver(module: str, path: Path) -> None:
    assert entrypoint_violations(path.read_text(encoding="utf-8"), module) == []


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


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT 1",
        "SELECT * FROM awa.storage_status()",
        "SELECT to_regclass(%s) IS NOT NULL AS present",
        "\nSELECT count(*) FILTER (WHERE live) AS live\nFROM awa.runtime_instances\n",
        "INSERT INTO awa.jobs (kind) VALUES ($1)",
        "UPDATE awa.queue_meta SET paused = true",
        "DELETE FROM awa.runtime_instances WHERE id = %s",
        "CREATE DATABASE {}",
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        "TRUNCATE awa.queue_ring_slot_0",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "LISTEN awa_queue",
        "SELECT pg_notify('awa:q', '')",
    ],
)
def test_checker_catches_sql_literals(statement: str) -> None:
    source = f"QUERY = {statement!r}\n"
    assert entrypoint_violations(source, "awa.entrypoints.bad") == [
        f"awa.entrypoints.bad:1 holds SQL {statement.strip()[:60]!r}"
    ]


def test_checker_sees_sql_in_bytes_calls_and_f_strings() -> None:
    source = (
        "async def go(conn, name):\n"
        "    await conn.execute(b'SELECT 1')\n"
        "    await conn.execute(f'DROP TABLE {name}')\n"
    )
    found = entrypoint_violations(source, "awa.entrypoints.bad")
    assert len(found) == 2
    assert found[0].startswith("awa.entrypoints.bad:2 holds SQL")
    assert found[1].startswith("awa.entrypoints.bad:3 holds SQL")


def test_checker_lets_prose_and_docstrings_through() -> None:
    source = (
        '"""Runs SELECT * FROM awa.jobs for you."""\n'
        "HELP = 'Select the queues to serve; update the schema with awa migrate.'\n"
        "NOTE = 'the database is not migrated (awa.storage_transition_state is missing)'\n"
        "def f() -> None:\n"
        '    """BEGIN a transaction and SELECT 1 FROM it."""\n'
    )
    assert entrypoint_violations(source, "awa.entrypoints.fine") == []


def test_checker_catches_drivers_outside_the_allowed_modules() -> None:
    source = (
        "import psycopg\n"
        "from psycopg.conninfo import make_conninfo\n"
        "import asyncpg\n"
        "from sqlalchemy import text\n"
    )
    found = entrypoint_violations(source, "awa.entrypoints.cli.bad")
    assert "awa.entrypoints.cli.bad:1 imports psycopg" in found
    assert "awa.entrypoints.cli.bad:2 imports psycopg.conninfo" in found
    assert "awa.entrypoints.cli.bad:3 imports asyncpg" in found
    assert "awa.entrypoints.cli.bad:4 imports sqlalchemy" in found
    assert entrypoint_violations("import psycopg\n", "awa.entrypoints.bootstrap") == []
    # The adapters that hold the SQL are what entrypoints import instead.
    assert entrypoint_violations("from awa.adapters._pg import admin\n", "awa.bridge") == []


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


# ---------------------------------------------------------------- integrations (awa.contrib)

#: What an integration may not import: it uses Awa through its public API and the
#: entrypoints (and the domain's types), never an engine or the runtime directly.
CONTRIB_FORBIDDEN = ("awa.adapters", "awa.runtime", "psycopg", "psycopg_pool")
#: Modules outside ``awa.contrib`` that may import Django, and why.
DJANGO_ALLOWED = {
    "awa.adapters._pg.insert_compat": (
        "the bridge inserts on a Django connection and follows its commit with "
        "transaction.on_commit, imported only when given one"
    ),
}


def _all_modules() -> list[tuple[str, Path]]:
    return [(_dotted(path), path) for path in sorted(AWA_ROOT.rglob("*.py"))]


def contrib_modules() -> list[tuple[str, Path]]:
    return [(name, path) for name, path in _all_modules() if _within(name, "awa.contrib")]


def outside_contrib_violations(source: str, module: str) -> list[str]:
    """Imports of ``awa.contrib`` or (outside :data:`DJANGO_ALLOWED`) Django by a module
    that is not an integration: the core runs without any framework."""
    package = module.removesuffix(".__init__").rsplit(".", 1)[0]
    problems = set()
    for line, name in imported_modules(source, package):
        django = _within(name, "django") and module not in DJANGO_ALLOWED
        if django or _within(name, "awa.contrib"):
            problems.add(f"{module}:{line} imports {name}")
    return sorted(problems)


def contrib_violations(source: str, module: str) -> list[str]:
    init = module.endswith(".__init__")
    package = module.removesuffix(".__init__") if init else module.rsplit(".", 1)[0]
    return sorted(
        {
            f"{module}:{line} imports {name} (integrations use the public API and entrypoints)"
            for line, name in imported_modules(source, package)
            if any(_within(name, bad) for bad in CONTRIB_FORBIDDEN)
        }
    )


def test_the_django_integration_exists_and_the_allowance_names_a_real_module() -> None:
    names = {name for name, _ in contrib_modules()}
    assert {"awa.contrib.django.backend", "awa.contrib.django.worker"} <= names
    assert set(DJANGO_ALLOWED) <= {name for name, _ in _all_modules()}


@pytest.mark.parametrize(
    ("module", "path"),
    [(n, p) for n, p in _all_modules() if not _within(n, "awa.contrib")],
    ids=lambda v: str(v),
)
def test_nothing_outside_the_integrations_imports_them_or_django(module: str, path: Path) -> None:
    assert outside_contrib_violations(path.read_text(encoding="utf-8"), module) == []


@pytest.mark.parametrize(("module", "path"), contrib_modules(), ids=lambda v: str(v))
def test_an_integration_uses_awa_through_its_entrypoints(module: str, path: Path) -> None:
    assert contrib_violations(path.read_text(encoding="utf-8"), module) == []


def test_checker_catches_django_in_the_core_and_an_engine_in_an_integration() -> None:
    assert outside_contrib_violations("from django.db import models\n", "awa.runtime.bad") == [
        "awa.runtime.bad:1 imports django.db",
        "awa.runtime.bad:1 imports django.db.models",
    ]
    assert outside_contrib_violations("import awa.contrib.django\n", "awa.entrypoints.bad") == [
        "awa.entrypoints.bad:1 imports awa.contrib.django"
    ]
    assert contrib_violations("from awa.adapters import inmemory\n", "awa.contrib.x.bad") == [
        "awa.contrib.x.bad:1 imports awa.adapters (integrations use the public API and "
        "entrypoints)",
        "awa.contrib.x.bad:1 imports awa.adapters.inmemory (integrations use the public API "
        "and entrypoints)",
    ]
