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


# ---------------------------------------------------------------- the placeholder forms
DOCS_TABLE = PACKAGE_DIR.parents[2] / "docs" / "internals" / "sql.md"
#: What each form the docs' table may list looks like in a statement.
KNOWN_FORMS = {
    "{word}": re.compile(r"\{[a-z_][a-z0-9_]*\}"),
    "{entry slot=entry ...}": re.compile(
        r"\{[a-z_][a-z0-9_]*(?:\s+[a-z_][a-z0-9_]*=[a-z_][a-z0-9_]*)+\}"
    ),
    "%(name)s": re.compile(r"%\([A-Za-z_][A-Za-z0-9_]*\)s"),
    "%%": re.compile(r"%%"),
}
#: Every ``%`` use of a statement's text (a parameter, ``%%`` or anything else).
_PERCENT = re.compile(r"%%|%\([^)]*\)[a-z]?|%.?", re.DOTALL)


def _documented_forms() -> list[str]:
    """The first cell of each row of the forms table in docs/internals/sql.md."""
    text = DOCS_TABLE.read_text(encoding="utf-8")
    table = text[text.index("| Form |") :].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("| `")]
    return [row.split("`", 2)[1] for row in rows]


def _forms_used(text: str) -> list[str]:
    """Every placeholder-shaped brace expression and ``%`` use of ``text``."""
    braces = [m.group(0) for m in statements.PLACEHOLDER_SHAPED.finditer(text)]
    return braces + [m.group(0) for m in _PERCENT.finditer(text)]


def test_the_docs_table_lists_the_forms_this_test_knows() -> None:
    documented = _documented_forms()
    assert documented, "no forms table in docs/internals/sql.md"
    assert set(documented) <= set(KNOWN_FORMS), "the table lists a form this test cannot read"
    assert len(documented) <= 4


def test_every_statement_uses_only_the_forms_the_docs_table_lists() -> None:
    documented = [KNOWN_FORMS[form] for form in _documented_forms()]
    unlisted: list[tuple[str, str]] = []
    for filename in statements.FILES:
        for name, text in load_queries(statements.PACKAGE, filename).items():
            for used in _forms_used(text):
                if not any(form.fullmatch(used) for form in documented):
                    unlisted.append((name, used))
    assert unlisted == []


def test_a_form_the_table_does_not_list_is_seen() -> None:
    listed = [KNOWN_FORMS[form] for form in _documented_forms()]
    for text in ("x {?slot} y", "x {a b} y", "100 % done", "%s", "{Word}"):
        assert any(not any(f.fullmatch(u) for f in listed) for u in _forms_used(text)), text
    assert _forms_used("'{}'::jsonb, '{1,2}'::int[], %(a)s %%") == ["%(a)s", "%%"]


def _with_entries(monkeypatch: pytest.MonkeyPatch, extra: dict[str, str]) -> None:
    """The engine's files, plus ``extra`` entries in the last one."""

    def load(package: str, filename: str) -> dict[str, str]:
        found = dict(load_queries(package, filename))
        if filename == statements.FILES[-1]:
            found.update(extra)
        return found

    monkeypatch.setattr(statements, "load_queries", load)


@pytest.mark.parametrize(
    ("entries", "refusal"),
    [
        ({"odd": "SELECT 1 {?old_optional_slot}"}, "no placeholder form"),
        ({"odd": "SELECT {Shouting}"}, "no placeholder form"),
        ({"odd": "SELECT {claim_body claims=no_such_entry}"}, "binds 'claims' to no entry"),
        ({"odd": "SELECT {no_such_entry x=nothing}"}, "binds slots of no entry"),
        ({"odd": "{frag s=nothing}", "frag": "{s}"}, r"slot names \['s'\]"),
        ({"odd": "SELECT {claim_body claims=ring_claims}"}, "leaves the slot"),
    ],
)
def test_statements_that_break_the_forms_are_refused(
    monkeypatch: pytest.MonkeyPatch, entries: dict[str, str], refusal: str
) -> None:
    _with_entries(monkeypatch, entries)
    with pytest.raises(ValueError, match=refusal):
        Statements("awa")


def test_slots_are_bound_to_entries_or_nothing_and_seen_by_nested_includes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _with_entries(
        monkeypatch,
        {
            "outer_frag": "A {inner_frag} B {tail}",
            "inner_frag": "[{what}]",
            "what_here": "{s}.t",
            "both": "{outer_frag what=what_here tail=nothing}",
        },
    )
    rendered = Statements("awa")
    assert rendered.text("both") == 'A ["awa".t] B '
    # A fragment on its own keeps its slots: it cannot run by mistake.
    assert rendered.text("outer_frag") == "A [{what}] B {tail}"
    with pytest.raises(KeyError):
        rendered["outer_frag"]


#: Where each queue-storage schema's own tables and sequences are created.
_INSTALLERS = (
    "awa.install_queue_storage.sql",
    "awa.install_queue_storage_tables.sql",
    "awa.queue_storage_install_spares.sql",
)
_PER_SCHEMA = re.compile(
    r"CREATE (?:UNLOGGED )?(?:TABLE|SEQUENCE)(?: IF NOT EXISTS)? %(?:\d\$)?s\.([a-z_]+)"
)


def _per_schema_objects() -> set[str]:
    functions = PACKAGE_DIR.parent / "_pg" / "schema" / "functions"
    found: set[str] = set()
    for name in _INSTALLERS:
        found.update(_PER_SCHEMA.findall((functions / name).read_text(encoding="utf-8")))
    return found


def test_statements_reach_a_schemas_own_tables_through_the_schema_placeholder() -> None:
    # ``awa.`` names only what every schema shares (ADR 0007: awa.queue_meta,
    # awa.job_unique_claims, the types and functions); a table or sequence each schema
    # has of its own is ``{s}.``, or a private schema's engine would use the default's.
    own = _per_schema_objects()
    assert {"ready_entries", "lanes", "claims", "fact_seq", "leases"} <= own
    hard_coded = [
        (name, used)
        for filename in statements.FILES
        for name, text in load_queries(statements.PACKAGE, filename).items()
        for used in re.findall(r"\bawa\.([a-z_]+)", _code(text))
        if used in own
    ]
    assert hard_coded == []
