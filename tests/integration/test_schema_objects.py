"""Schema files: every function and view of schema awa has one file, migrate applies a file
again when its content changes, in dependency order, dropping and recreating what
``CREATE OR REPLACE`` cannot change in place (ADR 0012)."""

from __future__ import annotations

import psycopg
import pytest

from awa.adapters._pg import schema_objects as schema_objects_module
from awa.adapters._pg.migrations import migrate
from awa.adapters._pg.schema_objects import SchemaObject, dependents_of, schema_objects
from awa.domain.errors import SchemaNotMigrated

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Catalog dependencies between functions and views of schema awa: a view's rules and
#: triggers belong to the view, a function depends on the row type of a view it takes.
_DEPENDENCIES = """
WITH objects AS (
    SELECT 'pg_proc'::regclass AS classid, p.oid AS objid, 'awa.' || p.proname AS name
    FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace
    UNION ALL
    SELECT 'pg_class'::regclass, c.oid, 'awa.' || c.relname
    FROM pg_class c WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT 'pg_type'::regclass, c.reltype, 'awa.' || c.relname
    FROM pg_class c WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'v'
), parts AS (
    SELECT 'pg_rewrite'::regclass AS classid, r.oid AS objid, 'awa.' || c.relname AS name
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
    WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT 'pg_trigger'::regclass, t.oid, 'awa.' || c.relname
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT classid, objid, name FROM objects WHERE classid = 'pg_proc'::regclass
)
SELECT DISTINCT p.name AS dependent, o.name AS required
FROM pg_depend d
JOIN parts p ON p.classid = d.classid AND p.objid = d.objid
JOIN objects o ON o.classid = d.refclassid AND o.objid = d.refobjid
WHERE p.name <> o.name
"""


def _catalog(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(query.encode(), params or None).fetchall())


def _names(kind: str) -> set[str]:
    return {obj.name for obj in schema_objects() if obj.kind == kind}


def _object(kind: str, name: str, sql: str) -> SchemaObject:
    return schema_objects_module._parse(f"schema/{kind}s/{name}.sql", kind, name, sql)


def _with(monkeypatch: pytest.MonkeyPatch, *extra: SchemaObject) -> None:
    """Make migrate see the package's schema files plus ``extra``."""
    objects = {obj.name: obj for obj in schema_objects()}
    objects.update({obj.name: obj for obj in extra})
    ordered = schema_objects_module._ordered(objects)
    monkeypatch.setattr(schema_objects_module, "schema_objects", lambda: ordered)


def test_files_are_applied_after_what_they_require() -> None:
    order = [obj.name for obj in schema_objects()]
    position = {name: index for index, name in enumerate(order)}
    for obj in schema_objects():
        for required in obj.requires:
            assert position[required] < position[obj.name], (obj.name, required)
    assert position["awa.jobs"] < position["awa.queue_storage_edit"]
    assert position["awa.jobs"] < position["awa.insert_job_compat"]
    assert [d.name for d in dependents_of("awa.queue_storage_jobs")] == [
        "awa.jobs",
        "awa.dependency_parents",
        "awa.insert_job_append",
        "awa.queue_storage_edit",
        "awa.unique_conflict_merge",
        "awa.insert_job_compat",
    ]


def test_malformed_schema_files_are_refused() -> None:
    with pytest.raises(RuntimeError, match=r"exactly one CREATE OR REPLACE FUNCTION awa\.a"):
        _object("function", "awa.a", "CREATE FUNCTION awa.a() RETURNS int AS 'SELECT 1';")
    with pytest.raises(RuntimeError, match=r"holds \['awa.a', 'awa.b'\]"):
        _object(
            "function",
            "awa.a",
            "CREATE OR REPLACE FUNCTION awa.a() RETURNS int LANGUAGE sql AS 'SELECT 1';\n"
            "CREATE OR REPLACE FUNCTION awa.b() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        )
    a = _object("view", "awa.a", "-- requires: awa.b\nCREATE OR REPLACE VIEW awa.a AS SELECT 1;")
    b = _object("view", "awa.b", "-- requires: awa.a\nCREATE OR REPLACE VIEW awa.b AS SELECT 1;")
    with pytest.raises(RuntimeError, match=r"cycle: \['awa.a', 'awa.b'\]"):
        schema_objects_module._ordered({"awa.a": a, "awa.b": b})
    with pytest.raises(RuntimeError, match=r"schema/views/awa.a.sql requires \['awa.b'\]"):
        schema_objects_module._ordered({"awa.a": a})


def test_every_function_and_view_of_schema_awa_has_its_file(migrated_database_url: str) -> None:
    functions = _catalog(
        migrated_database_url,
        "SELECT DISTINCT 'awa.' || proname FROM pg_proc WHERE pronamespace = 'awa'::regnamespace",
    )
    assert {row[0] for row in functions} == _names("function")
    # Besides the view files, schema awa holds the resolution views of the queue storage
    # installed in it, which awa.queue_storage_install_views defines for every schema.
    views = _catalog(
        migrated_database_url,
        "SELECT c.relname, n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE c.relkind = 'v' AND n.nspname = 'awa'",
    )
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage('qs_views', 2, 1, false)")
        engine_views = {
            row[0]
            for row in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'v' "
                "AND relnamespace = 'qs_views'::regnamespace"
            )
        }
    assert {f"awa.{name}" for name, _ in views if name not in engine_views} == _names("view")
    assert engine_views == {"job_facts", "jobs_resolved", "terminal_jobs"}


def test_requires_cover_what_the_catalog_depends_on(migrated_database_url: str) -> None:
    managed = {obj.name: obj for obj in schema_objects()}
    edges = [
        (str(dependent), str(required))
        for dependent, required in _catalog(migrated_database_url, _DEPENDENCIES)
        if dependent in managed and required in managed
    ]
    assert edges, "the catalog shows no dependency between schema files"
    undeclared = [
        (dependent, required)
        for dependent, required in edges
        if managed[dependent] not in dependents_of(required)
    ]
    assert undeclared == []


async def test_migrate_records_every_file_and_applies_none_again(database_url: str) -> None:
    await migrate(database_url)
    recorded = _catalog(
        database_url, "SELECT name, kind, sha256, applied_at FROM awa.schema_objects"
    )
    assert {(name, kind, sha) for name, kind, sha, _ in recorded} == {
        (obj.name, obj.kind, obj.sha256) for obj in schema_objects()
    }
    await migrate(database_url)
    again = _catalog(database_url, "SELECT name, kind, sha256, applied_at FROM awa.schema_objects")
    assert sorted(again) == sorted(recorded)  # not even applied_at moved


async def test_a_changed_file_is_applied_again_and_reaches_installed_schemas(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new definition replaces the old one on the next migrate, and every installed
    queue-storage schema is brought to the install function again (here: a stand-in
    dropped by hand comes back)."""
    await migrate(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE awa.claims_5_spare")
    await migrate(database_url)  # nothing changed: nothing is applied or installed
    assert _catalog(database_url, "SELECT to_regclass('awa.claims_5_spare')") == [(None,)]
    (channel,) = [obj for obj in schema_objects() if obj.name == "awa.wake_channel"]
    edited = channel.sql.replace("RETURN v_channel;\nEND", "RETURN v_channel; /* v2 */\nEND")
    assert edited != channel.sql
    changed = _object("function", channel.name, edited)
    _with(monkeypatch, changed)
    await migrate(database_url)
    (source,) = _catalog(
        database_url, "SELECT prosrc FROM pg_proc WHERE oid = 'awa.wake_channel'::regproc"
    )
    assert "/* v2 */" in str(source[0])
    assert _catalog(
        database_url, "SELECT sha256 FROM awa.schema_objects WHERE name = 'awa.wake_channel'"
    ) == [(changed.sha256,)]
    assert _catalog(database_url, "SELECT to_regclass('awa.claims_5_spare') IS NOT NULL") == [
        (True,)
    ]


async def test_an_object_missing_from_the_catalog_is_created_again(database_url: str) -> None:
    await migrate(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION awa.wake_channel(text)")
    await migrate(database_url)
    assert _catalog(database_url, "SELECT awa.wake_channel('q')") == [("awa:q",)]


_PROBE_V1 = (
    "CREATE OR REPLACE FUNCTION awa.probe_value() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;"
)
_PROBE_V2 = (
    "CREATE OR REPLACE FUNCTION awa.probe_value() RETURNS text LANGUAGE sql AS $$ SELECT 'two' $$;"
)
_PROBE_VIEW = (
    "-- requires: awa.probe_value\n"
    "CREATE OR REPLACE VIEW awa.probe_view AS SELECT awa.probe_value() AS v;"
)


def _probe(url: str) -> list[tuple[object, ...]]:
    return _catalog(
        url,
        "SELECT v::text, pg_typeof(v)::text, "
        "(SELECT count(*) FROM pg_proc WHERE proname = 'probe_value') FROM awa.probe_view",
    )


async def test_a_change_create_or_replace_refuses_drops_and_recreates_what_requires_it(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    function = _object("function", "awa.probe_value", _PROBE_V1)
    view = _object("view", "awa.probe_view", _PROBE_VIEW)
    _with(monkeypatch, function, view)
    await migrate(database_url)
    assert _probe(database_url) == [("1", "integer", 1)]
    # Another return type: the view that uses it is dropped and created again.
    _with(
        monkeypatch,
        _object("function", "awa.probe_value", _PROBE_V2),
        view,
    )
    await migrate(database_url)
    assert _probe(database_url) == [("two", "text", 1)]
    # A new argument list: the old overload goes, the view is bound to the new one.
    _with(
        monkeypatch,
        _object(
            "function",
            "awa.probe_value",
            "CREATE OR REPLACE FUNCTION awa.probe_value(p int DEFAULT 3) RETURNS text "
            "LANGUAGE sql AS 'SELECT p::text';",
        ),
        view,
    )
    await migrate(database_url)
    assert _probe(database_url) == [("3", "text", 1)]
    # Files removed: their objects and records go.
    monkeypatch.undo()
    await migrate(database_url)
    assert _catalog(
        database_url,
        "SELECT to_regclass('awa.probe_view'), (SELECT count(*) FROM pg_proc "
        "WHERE proname = 'probe_value'), (SELECT count(*) FROM awa.schema_objects "
        "WHERE name LIKE 'awa.probe%%')",
    ) == [(None, 0, 0)]


async def test_a_drop_that_outside_objects_depend_on_is_refused_naming_the_file(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = _object("view", "awa.probe_view", _PROBE_VIEW)
    _with(monkeypatch, _object("function", "awa.probe_value", _PROBE_V1), view)
    await migrate(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.probe_outside AS SELECT v FROM awa.probe_view")
    _with(
        monkeypatch,
        _object("function", "awa.probe_value", _PROBE_V2),
        view,
    )
    with pytest.raises(SchemaNotMigrated) as refused:
        await migrate(database_url)
    assert "schema/views/awa.probe_view.sql" in str(refused.value)
    assert "probe_outside" in str(refused.value)
    assert _probe(database_url) == [("1", "integer", 1)]  # all or nothing


_ENGINE_RELATIONS = """
SELECT c.relname, c.relkind::text,
       CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid)
            ELSE awa.queue_storage_relation_shape(c.oid) END
FROM pg_class c
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
  AND c.relname IN (SELECT relname FROM pg_class WHERE relnamespace = 'qs_shape'::regnamespace)
"""


def test_a_new_schema_gets_the_engine_catalog_the_stream_built_in_awa(
    migrated_database_url: str,
) -> None:
    """Schema awa was installed by migration 0100 and upgraded by each later migration, a
    new schema by the install function alone: every table, partition, stand-in, sequence
    and view of the engine comes out the same."""
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage('qs_shape', 16, 8, false)")

        def engine_catalog(schema: str) -> dict[str, tuple[str, str]]:
            rows = conn.execute(_ENGINE_RELATIONS.encode(), (schema,)).fetchall()
            return {
                str(name): (str(kind), str(text or "").replace(f"{schema}.", "awa."))
                for name, kind, text in rows
            }

        built = engine_catalog("qs_shape")
        assert len(built) > 100  # 16 x 5 partitions, their stand-ins, the rings, the views
        assert engine_catalog("awa") == built


_CATALOG_ROWS = """
SELECT 'class', c.oid, c.xmin::text FROM pg_class c WHERE c.relnamespace = 'awa'::regnamespace
UNION ALL
SELECT 'rule', r.oid, r.xmin::text FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
WHERE c.relnamespace = 'awa'::regnamespace
UNION ALL
SELECT 'index', i.indexrelid, i.xmin::text FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = 'awa'::regnamespace
UNION ALL
SELECT 'constraint', k.oid, k.xmin::text FROM pg_constraint k
WHERE k.connamespace = 'awa'::regnamespace
"""


def test_installing_an_installed_schema_again_changes_no_catalog_row(
    migrated_database_url: str,
) -> None:
    """Every engine open runs the install: it must leave the schema exactly as it is (it
    once put an older job_facts back and rebuilt an index on every claims partition)."""
    before = sorted(_catalog(migrated_database_url, _CATALOG_ROWS))
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage()")
        conn.execute("SELECT awa.queue_storage_refresh()")
    assert sorted(_catalog(migrated_database_url, _CATALOG_ROWS)) == before
