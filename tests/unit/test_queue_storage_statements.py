"""The queue-storage engine's statements: every one is a named entry of a ``.sql`` file,
rendered once per schema, and the engine's Python holds no SQL of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from psycopg import sql

from awa.adapters._pg.sql import load_queries
from awa.adapters.postgres_queue_storage import statements
from awa.adapters.postgres_queue_storage.statements import Statements

PACKAGE_DIR = Path(statements.__file__).parent
#: How a statement begins; a Python string that begins so is SQL written in Python.
_SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|LOCK|TRUNCATE|VACUUM|SET|"
    r"RESET|COPY|EXPLAIN|DO)\b"
)


def _string_parts(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant (docstrings aside) and the leading text of every f-string,
    with its line."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(value) for value in node.values)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                found.append((node.lineno, head.value))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str | bytes)
            and id(node) not in skip
        ):
            text = node.value if isinstance(node.value, str) else node.value.decode()
            found.append((node.lineno, text))
    return found


def _code(text: str) -> str:
    """``text`` without comments, whitespace collapsed."""
    return " ".join(re.sub(r"--[^\n]*", "", text).split())


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_no_statement_is_written_in_python(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    offending = [(line, text[:60]) for line, text in _string_parts(tree) if _SQL_START.match(text)]
    assert offending == [], f"SQL written in {path.name}"


def test_the_checker_sees_sql_in_strings_and_f_strings() -> None:
    tree = ast.parse('"""SELECT docs."""\nx = f"SELECT {a} FROM t"\ny = b"LOCK TABLE t"\nz = "Set"')
    assert [text for _, text in _string_parts(tree) if _SQL_START.match(text)] == [
        "SELECT ",
        "LOCK TABLE t",
    ]


def test_every_statement_renders_for_a_schema_name_that_needs_quoting() -> None:
    # Case is kept only because the name is quoted (the schema-name rule allows capitals).
    rendered = Statements("We_Ird")
    assert '"We_Ird".ready_entries' in rendered.text("insert_ready")
    for name in rendered._raw:
        text = rendered.text(name)
        assert "{s}" not in text and "{?" not in text, name


def test_includes_fill_their_slots_and_leave_the_bare_statement_alone() -> None:
    rendered = Statements("awa")
    routed = rendered.text("enqueue_ready_routed")
    plain = rendered.text("enqueue_ready")
    check = rendered.text("route_check")
    assert check in routed and check not in plain
    assert _code(routed.replace(check, "")) == _code(plain)
    counted = rendered.text("complete_receipts_counted")
    arbitrated = rendered.text("complete_receipts_arbitrated")
    assert "ON CONFLICT DO NOTHING\n    RETURNING slot, claim_id, queue" in arbitrated
    assert "ON CONFLICT DO NOTHING\n    RETURNING slot, claim_id, queue" not in counted
    assert str(statements.KEYLESS_LANES) in rendered.text("reserve_lanes")


def test_per_call_placeholders_must_be_filled() -> None:
    rendered = Statements("awa")
    with pytest.raises(KeyError, match="per-call"):
        rendered["slot_has_rows"]
    for_slot = rendered.for_slot("slot_has_rows", 3).decode()
    assert '"awa"."ready_entries_3"' in for_slot and "{" not in for_slot
    stage = rendered.render("copy_stage", stage=sql.Identifier("stage_1")).decode()
    assert stage == 'COPY "stage_1" FROM STDIN (FORMAT BINARY)'
    with pytest.raises(KeyError, match="stage"):
        rendered.render("copy_stage")


def test_a_statement_named_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statements, "FILES", ("claim.sql", "claim.sql"))
    with pytest.raises(ValueError, match="named twice"):
        Statements("awa")


def test_a_name_taken_by_another_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # finalize.sql as shipped, plus an entry named as one of claim.sql's.
    def load(package: str, filename: str) -> dict[str, str]:
        found = dict(load_queries(package, filename))
        if filename == "finalize.sql":
            found["claim_body"] = "SELECT 1"
        return found

    monkeypatch.setattr(statements, "load_queries", load)
    with pytest.raises(ValueError, match="'claim_body' is named twice"):
        Statements("awa")


def test_every_sql_file_beside_the_engine_is_loaded() -> None:
    # A statement file added beside the parts but not listed would never be read (and a
    # listed one that is missing fails every engine build): the list is the directory.
    on_disk = sorted(path.name for path in PACKAGE_DIR.glob("*.sql"))
    assert sorted(statements.FILES) == on_disk
    assert len(set(statements.FILES)) == len(statements.FILES)


def test_every_statement_of_the_engine_is_found_by_name() -> None:
    rendered = Statements("awa")
    for filename in statements.FILES:
        names = load_queries(statements.PACKAGE, filename)
        assert names, filename
        for name in names:
            assert rendered.text(name)
