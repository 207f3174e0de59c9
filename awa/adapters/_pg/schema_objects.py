"""The schema's functions and views: one current definition each, applied by content hash.

Every function and view of schema ``awa`` is defined by one file,
``awa/adapters/_pg/schema/functions/<schema>.<name>.sql`` or ``.../views/<schema>.<name>.sql``,
written with ``CREATE OR REPLACE``. The migration stream is history (what existing databases
applied); these files are the current truth. ``migrate`` applies them after the stream
(ADR 0012):

* a file is applied when its SHA-256 differs from the one recorded in
  ``awa.schema_objects``, or when its object is missing from the catalog;
* files are applied in dependency order: a file names what must exist before it with
  ``-- requires: awa.a, awa.b`` lines (a view needs the functions it calls, a function
  whose signature takes a view's row type needs the view); ties go by name;
* when ``CREATE OR REPLACE`` cannot turn the old definition into the new one (another
  return type, renamed parameters, a view column removed, renamed or retyped), the object
  and every managed object that requires it, directly or not, are dropped and created
  again; a function whose argument list changed leaves its old overload, which is
  dropped the same way;
* an object recorded in ``awa.schema_objects`` whose file is gone is dropped.

A drop that something outside these files depends on (a table's trigger or CHECK
constraint, an operator's own view) is refused with :class:`SchemaNotMigrated` naming
the file and the dependents; such a change needs a migration that moves them first.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import re
from importlib import resources

import attrs
from psycopg import errors as pg_errors
from psycopg import sql

from awa.adapters._pg.pool import DictConnection
from awa.domain.errors import SchemaNotMigrated

_PACKAGE = "awa.adapters._pg"
#: Directory under ``schema/`` -> kind of object its files define.
_KINDS = {"functions": "function", "views": "view"}
_FILE_NAME = re.compile(r"^(awa\.[a-z_][a-z0-9_]*)\.sql$")
_REQUIRES = re.compile(r"^--\s*requires:(.*)$", re.MULTILINE)
_CREATES = {
    "function": re.compile(r"\bCREATE\s+OR\s+REPLACE\s+FUNCTION\s+([a-z0-9_.]+)\s*\(", re.I),
    "view": re.compile(r"\bCREATE\s+OR\s+REPLACE\s+VIEW\s+([a-z0-9_.]+)\s", re.I),
}
#: What ``CREATE OR REPLACE`` raises for a change it cannot make in place.
_NOT_REPLACEABLE = (
    pg_errors.InvalidFunctionDefinition,  # return type, parameter names or defaults
    pg_errors.InvalidTableDefinition,  # a view column dropped, renamed or retyped
    pg_errors.WrongObjectType,  # a function became a procedure, a view a table...
)


@attrs.frozen
class SchemaObject:
    """One schema file: the object it defines, its SQL and what it requires."""

    name: str
    kind: str
    path: str
    sql: str
    requires: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _parse(path: str, kind: str, name: str, sql: str) -> SchemaObject:
    created = _CREATES[kind].findall(sql)
    if created != [name]:
        raise RuntimeError(
            f"schema file {path} must hold exactly one CREATE OR REPLACE {kind.upper()} "
            f"{name}; it holds {created or 'none'}"
        )
    requires: list[str] = []
    for line in _REQUIRES.findall(sql):
        requires += [item.strip() for item in line.split(",") if item.strip()]
    return SchemaObject(name=name, kind=kind, path=path, sql=sql, requires=tuple(requires))


@functools.cache
def schema_objects() -> tuple[SchemaObject, ...]:
    """Every schema file, in the order ``migrate`` applies them."""
    root = resources.files(_PACKAGE).joinpath("schema")
    found: dict[str, SchemaObject] = {}
    for directory, kind in _KINDS.items():
        for entry in sorted(root.joinpath(directory).iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql"):
                continue
            path = f"schema/{directory}/{entry.name}"
            match = _FILE_NAME.match(entry.name)
            if match is None:
                raise RuntimeError(f"schema file {path}: name it awa.<object>.sql")
            name = match.group(1)
            if name in found:
                raise RuntimeError(f"schema files {found[name].path} and {path} define {name}")
            found[name] = _parse(path, kind, name, entry.read_text(encoding="utf-8"))
    return _ordered(found)


def _ordered(objects: dict[str, SchemaObject]) -> tuple[SchemaObject, ...]:
    """Topological order over ``requires``; among objects ready together, by name."""
    waiting: dict[str, set[str]] = {}
    dependents: dict[str, list[str]] = {name: [] for name in objects}
    for obj in objects.values():
        unknown = [r for r in obj.requires if r not in objects]
        if unknown:
            raise RuntimeError(f"schema file {obj.path} requires {unknown}, defined by no file")
        waiting[obj.name] = set(obj.requires)
        for required in obj.requires:
            dependents[required].append(obj.name)
    ready = [name for name, needs in waiting.items() if not needs]
    heapq.heapify(ready)
    order: list[SchemaObject] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(objects[name])
        for dependent in dependents[name]:
            waiting[dependent].discard(name)
            if not waiting[dependent]:
                heapq.heappush(ready, dependent)
    if len(order) < len(objects):
        cycle = sorted(set(objects) - {obj.name for obj in order})
        raise RuntimeError(f"schema files require each other in a cycle: {cycle}")
    return tuple(order)


def dependents_of(name: str) -> list[SchemaObject]:
    """The schema objects that require ``name``, directly or not, in apply order."""
    closure = {name}
    found: list[SchemaObject] = []
    for obj in schema_objects():
        if closure.intersection(obj.requires):
            closure.add(obj.name)
            found.append(obj)
    return found


async def apply_schema_objects(conn: DictConnection) -> list[str]:
    """Apply every schema file that changed since it was last applied, or whose object is
    missing, and drop the objects whose file is gone. Returns the names applied, in order.

    Must run inside a transaction, under the migration lock: a failure leaves the catalog
    and ``awa.schema_objects`` as they were.
    """
    recorded = await _recorded(conn)
    objects = schema_objects()
    pending = {obj.name for obj in await _pending(conn, recorded)}
    names = {obj.name for obj in objects}
    removed = sorted(name for name in recorded if name not in names)
    if not pending and not removed:
        return []
    run = _Run(conn, pending)
    await conn.execute("SET LOCAL check_function_bodies = off")
    # Views first (they may use a removed function), functions after every file is applied
    # (a view of a file may have used one until it was replaced).
    for name in removed:
        if recorded[name][0] == "view":
            await run.drop_object(name, "view", f"the removed file of {name}")
    for obj in objects:
        if obj.name in run.pending:
            await run.apply(obj)
    for name in removed:
        if recorded[name][0] == "function":
            await run.drop_object(name, "function", f"the removed file of {name}")
    if removed:
        await conn.execute("DELETE FROM awa.schema_objects WHERE name = ANY(%s)", (removed,))
    by_name = {obj.name: obj for obj in objects}
    for name in run.applied:
        obj = by_name[name]
        await conn.execute(
            "INSERT INTO awa.schema_objects (name, kind, sha256, applied_at) "
            "VALUES (%s, %s, %s, clock_timestamp()) ON CONFLICT (name) DO UPDATE "
            "SET kind = EXCLUDED.kind, sha256 = EXCLUDED.sha256, applied_at = EXCLUDED.applied_at",
            (obj.name, obj.kind, obj.sha256),
        )
    return run.applied


async def pending_schema_objects(conn: DictConnection) -> list[SchemaObject]:
    """The schema files the next ``migrate`` applies, in order (every one on a database
    that never recorded any)."""
    cur = await conn.execute("SELECT to_regclass('awa.schema_objects') IS NOT NULL AS present")
    row = await cur.fetchone()
    recorded = await _recorded(conn) if row is not None and row["present"] else {}
    return await _pending(conn, recorded)


async def _recorded(conn: DictConnection) -> dict[str, tuple[str, str]]:
    cur = await conn.execute("SELECT name, kind, sha256 FROM awa.schema_objects")
    return {row["name"]: (row["kind"], row["sha256"]) for row in await cur.fetchall()}


async def _pending(
    conn: DictConnection, recorded: dict[str, tuple[str, str]]
) -> list[SchemaObject]:
    present = await _present(conn)
    return [
        obj
        for obj in schema_objects()
        if recorded.get(obj.name) != (obj.kind, obj.sha256) or (obj.kind, obj.name) not in present
    ]


async def _present(conn: DictConnection) -> set[tuple[str, str]]:
    cur = await conn.execute(
        "SELECT 'function' AS kind, n.nspname || '.' || p.proname AS name "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'awa' "
        "UNION SELECT 'view', n.nspname || '.' || c.relname "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'awa' AND c.relkind = 'v'"
    )
    return {(row["kind"], row["name"]) for row in await cur.fetchall()}


async def _overloads(conn: DictConnection, name: str) -> dict[int, str]:
    """``{oid: signature}`` of the functions called ``name`` (``schema.function``)."""
    schema, function = name.split(".", 1)
    cur = await conn.execute(
        "SELECT p.oid, p.oid::regprocedure::text AS signature "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s AND p.proname = %s",
        (schema, function),
    )
    return {int(row["oid"]): str(row["signature"]) for row in await cur.fetchall()}


class _Run:
    """One application of the schema files: what is still to apply and what was."""

    def __init__(self, conn: DictConnection, pending: set[str]) -> None:
        self._conn = conn
        self.pending = set(pending)
        self.applied: list[str] = []

    async def apply(self, obj: SchemaObject) -> None:
        before = await _overloads(self._conn, obj.name) if obj.kind == "function" else {}
        try:
            async with self._conn.transaction():
                await self._conn.execute(obj.sql.encode())
        except _NOT_REPLACEABLE:
            # Dropped with everything that requires it; those are applied again in turn.
            await self._drop_dependents(obj)
            await self.drop_object(obj.name, obj.kind, obj.path)
            await self._conn.execute(obj.sql.encode())
        if obj.kind == "function":
            after = await _overloads(self._conn, obj.name)
            if set(after) - set(before):
                # A new argument list made a second function: the old one goes.
                stale = [after[oid] for oid in before if oid in after]
                if stale:
                    await self._drop_dependents(obj)
                    for signature in stale:
                        statement = sql.SQL("DROP FUNCTION {}").format(sql.SQL(signature))
                        await self._drop(statement, obj.path, signature)
        self.applied.append(obj.name)

    async def _drop_dependents(self, obj: SchemaObject) -> None:
        for dependent in reversed(dependents_of(obj.name)):
            await self.drop_object(dependent.name, dependent.kind, dependent.path)
            self.pending.add(dependent.name)

    async def drop_object(self, name: str, kind: str, path: str) -> None:
        if kind == "view":
            schema, view = name.split(".", 1)
            statement = sql.SQL("DROP VIEW IF EXISTS {}.{}").format(
                sql.Identifier(schema), sql.Identifier(view)
            )
            await self._drop(statement, path, name)
            return
        for signature in (await _overloads(self._conn, name)).values():
            await self._drop(
                sql.SQL("DROP FUNCTION {}").format(sql.SQL(signature)), path, signature
            )

    async def _drop(self, statement: sql.Composed, path: str, what: str) -> None:
        try:
            async with self._conn.transaction():
                await self._conn.execute(statement)
        except pg_errors.DependentObjectsStillExist as exc:
            detail = (exc.diag.message_detail or "").replace("\n", "; ")
            raise SchemaNotMigrated(
                f"{path}: {what} must be dropped to apply this definition, but objects the "
                f"schema files do not define depend on it ({detail}); add a migration that "
                "moves them first"
            ) from exc
