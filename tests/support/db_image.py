"""A template database's image, and putting a used clone of it back to that image.

:class:`~tests.support.pg.DatabaseFactory` hands a released database to the next test
instead of dropping it and cloning a new one (``DROP DATABASE`` forces a checkpoint;
a clone writes the whole template through the WAL). That is only sound when the used
database can be made indistinguishable from a fresh clone, so:

- :func:`fingerprint` digests everything a test could change besides table rows and
  sequence values: every object a test created or dropped (the set of user OIDs in each
  per-database catalog), every change to an object the template had (whole catalog rows
  except the columns ``TRUNCATE``, ``VACUUM`` and ``ANALYZE`` rewrite), privileges on
  system objects, the database's own row and settings, prepared transactions,
  replication slots, subscriptions and large objects. A clone whose fingerprint differs
  from its template's is dropped, never reused.
- :func:`restore` empties every table that has rows now, puts back the rows the template
  had (``COPY`` with triggers off), sets every sequence to the template's value and
  resets the database's statistics counters.

See ``ADRs/0003-test-database-provisioning.md``.
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
from psycopg import sql

#: The first OID ``initdb`` leaves to user objects (``FirstNormalObjectId``).
FIRST_USER_OID = 16384

#: Namespaces that hold no test's objects (temporary namespaces start with ``pg_``).
_SYSTEM_NAMESPACE = "(starts_with(n.nspname, 'pg_') OR n.nspname = 'information_schema')"

#: Per-database catalogs digested row by row for user OIDs; pg_class separately, without
#: the columns a TRUNCATE, VACUUM or ANALYZE rewrites.
_OID_CATALOGS_SQL = """
SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r'
  AND NOT c.relisshared AND a.attname = 'oid' AND c.relname <> 'pg_class'
ORDER BY 1
"""

_CLASS_COLUMNS = (
    "oid, relname, relnamespace, reltype, relowner, relam, reltoastrelid, relhasindex,"
    " relpersistence, relkind, relnatts, relchecks, relhasrules, relhastriggers,"
    " relrowsecurity, relforcerowsecurity, relispopulated, relreplident, relispartition,"
    " relacl, reloptions, relpartbound"
)

#: Parts of the digest that are not one catalog's user rows.
_FIXED_PARTS = (
    f"SELECT ({_CLASS_COLUMNS})::text FROM pg_class WHERE oid >= {FIRST_USER_OID}",
    f"SELECT x::text FROM pg_attribute x WHERE attrelid >= {FIRST_USER_OID}",
    f"SELECT x::text FROM pg_index x WHERE indexrelid >= {FIRST_USER_OID}",
    f"SELECT x::text FROM pg_inherits x WHERE inhrelid >= {FIRST_USER_OID}",
    f"SELECT x::text FROM pg_description x WHERE objoid >= {FIRST_USER_OID}",
    f"SELECT x::text FROM pg_sequence x WHERE seqrelid >= {FIRST_USER_OID}",
    "SELECT x::text FROM pg_namespace x",
    "SELECT 'acl ' || oid || ' ' || relacl::text FROM pg_class WHERE relacl IS NOT NULL",
    "SELECT 'acl ' || oid || ' ' || proacl::text FROM pg_proc WHERE proacl IS NOT NULL",
    "SELECT 'acl ' || oid || ' ' || typacl::text FROM pg_type WHERE typacl IS NOT NULL",
    "SELECT 'lo ' || count(*) FROM pg_largeobject_metadata",
    "SELECT (datdba, encoding, datallowconn, datconnlimit, datistemplate, datacl)::text"
    " FROM pg_database WHERE datname = current_database()",
    "SELECT x::text FROM pg_db_role_setting x JOIN pg_database d ON d.oid = x.setdatabase"
    " WHERE d.datname = current_database()",
    "SELECT 'prepared ' || gid FROM pg_prepared_xacts WHERE database = current_database()",
    "SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = current_database()",
    "SELECT 'sub ' || x.subname FROM pg_subscription x JOIN pg_database d"
    " ON d.oid = x.subdbid WHERE d.datname = current_database()",
)


def _digest_statement(conn: psycopg.Connection[Any]) -> sql.Composed:
    catalogs = [row[0] for row in conn.execute(_OID_CATALOGS_SQL).fetchall()]
    parts: list[sql.Composable] = [sql.SQL(part) for part in _FIXED_PARTS]
    parts += [
        sql.SQL("SELECT {name} || x::text FROM {table} x WHERE oid >= {first}").format(
            name=sql.Literal(name + " "),
            table=sql.Identifier("pg_catalog", name),
            first=sql.Literal(FIRST_USER_OID),
        )
        for name in catalogs
    ]
    union = sql.SQL(" UNION ALL ").join(sql.SQL("({})").format(part) for part in parts)
    return sql.SQL("SELECT {} FROM ({}) AS d(t)").format(sql.SQL(_DIGEST), union)


#: An order-free digest of the text rows ``t``: their count and the sum of their 64-bit
#: hashes (sorting ten thousand catalog rows would cost more than the rest of a reset).
_DIGEST = "count(t)::text || ' ' || coalesce(sum(hashtextextended(t, 0)::numeric), 0)::text"


def _rows_digest(conn: psycopg.Connection[Any], table: str) -> str:
    row = conn.execute(f"SELECT {_DIGEST} FROM (SELECT x::text FROM {table} x) AS d(t)").fetchone()
    assert row is not None
    return str(row[0])


def fingerprint(conn: psycopg.Connection[Any]) -> str:
    """The digest of everything but row data and sequence values in ``conn``'s database."""
    row = conn.execute(_digest_statement(conn)).fetchone()
    assert row is not None and isinstance(row[0], str)
    return row[0]


def _relations(conn: psycopg.Connection[Any], kinds: str) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        f" WHERE c.relkind = ANY(%s) AND NOT {_SYSTEM_NAMESPACE} ORDER BY 1",
        (list(kinds),),
    ).fetchall()
    return tuple(str(row[0]) for row in rows)


@attrs.frozen
class TemplateImage:
    """What a fresh clone of one template looks like, to put a used clone back to it."""

    fingerprint: str
    #: Every table holding rows (leaf tables: partitions, not their parents), quoted.
    tables: tuple[str, ...]
    #: The tables the template has rows in: their rows (``COPY`` binary) and digest.
    rows: tuple[tuple[str, bytes, str], ...]
    #: Every sequence with the template's ``(last_value, is_called)``.
    sequences: tuple[tuple[str, int, bool], ...]
    #: Foreign keys as (referencing, referenced) tables: emptying the second empties
    #: the first.
    references: tuple[tuple[str, str], ...]
    #: The user relations the template holds planner statistics for (``pg_statistic``).
    analyzed: tuple[int, ...]


def capture(conn: psycopg.Connection[Any]) -> TemplateImage | None:
    """The image of ``conn``'s database, or None when its clones cannot be put back
    (materialized views: their contents would need refreshing; servers before 15: their
    statistics counters cannot be flushed on demand before the reset)."""
    if conn.info.server_version < 150000 or _relations(conn, "m"):
        return None
    tables = _relations(conn, "r")
    rows: list[tuple[str, bytes, str]] = []
    for table in tables:
        if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() != (True,):
            continue
        data = bytearray()
        with conn.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
            for chunk in copy:
                data += chunk
        rows.append((table, bytes(data), _rows_digest(conn, table)))
    sequences: list[tuple[str, int, bool]] = []
    for sequence in _relations(conn, "S"):
        value = conn.execute(f"SELECT last_value, is_called FROM {sequence}").fetchone()
        assert value is not None
        sequences.append((sequence, int(value[0]), bool(value[1])))
    references = conn.execute(
        "SELECT format('%I.%I', an.nspname, a.relname), format('%I.%I', bn.nspname, b.relname)"
        " FROM pg_constraint k JOIN pg_class a ON a.oid = k.conrelid"
        " JOIN pg_namespace an ON an.oid = a.relnamespace JOIN pg_class b ON b.oid = k.confrelid"
        " JOIN pg_namespace bn ON bn.oid = b.relnamespace WHERE k.contype = 'f' ORDER BY 1, 2"
    ).fetchall()
    analyzed = conn.execute(
        f"SELECT DISTINCT starelid::int8 FROM pg_statistic WHERE starelid >= {FIRST_USER_OID}"
    ).fetchall()
    conn.rollback()
    return TemplateImage(
        fingerprint(conn),
        tables,
        tuple(rows),
        tuple(sequences),
        tuple((str(a), str(b)) for a, b in references),
        tuple(int(row[0]) for row in analyzed),
    )


def _written(conn: psycopg.Connection[Any], image: TemplateImage) -> set[str]:
    """The tables that may hold rows the template's do not: every table without
    template rows whose file is not empty (a heap keeps its pages until truncated, so an
    empty file is an empty table), and every table with template rows whose digest
    moved."""
    seeded = {table for table, _, _ in image.rows}
    sized = conn.execute(
        "SELECT t FROM unnest(%s::text[]) AS t WHERE pg_relation_size(t::regclass) > 0",
        ([table for table in image.tables if table not in seeded],),
    ).fetchall()
    written = {str(row[0]) for row in sized}
    written |= {table for table, _, digest in image.rows if _rows_digest(conn, table) != digest}
    return written


def _with_referencing(tables: set[str], references: tuple[tuple[str, str], ...]) -> set[str]:
    closed = set(tables)
    grew = True
    while grew:
        grew = False
        for referencing, referenced in references:
            if referenced in closed and referencing not in closed:
                closed.add(referencing)
                grew = True
    return closed


def restore(conn: psycopg.Connection[Any], image: TemplateImage) -> bool:
    """Put ``conn``'s database (a used clone of ``image``'s template, no other session
    on it) back to ``image``; False, having changed nothing, when its fingerprint says a
    test changed more than rows and sequence values."""
    if fingerprint(conn) != image.fingerprint:
        conn.rollback()
        return False
    emptied = _with_referencing(_written(conn, image), image.references)
    # Triggers (and foreign-key checks) stay off: the rows put back are the template's.
    # No CASCADE: a table it would reach beyond ``emptied`` fails the reset (and the
    # database is dropped) rather than losing template rows.
    conn.execute("SET LOCAL session_replication_role = replica")
    if emptied:
        conn.execute(f"TRUNCATE {', '.join(sorted(emptied))}")
        # An ANALYZE (autovacuum's) of what a test wrote leaves statistics a fresh clone
        # does not have, and the planner would plan the next test by them.
        conn.execute(
            "DELETE FROM pg_statistic_ext_data d USING pg_statistic_ext e"
            " WHERE d.stxoid = e.oid AND e.stxrelid = ANY(%s::regclass[])",
            (sorted(emptied),),
        )
        conn.execute(
            "DELETE FROM pg_statistic WHERE NOT starelid = ANY(%s::oid[]) AND starelid IN"
            " (SELECT unnest(%s::regclass[])::oid UNION ALL SELECT indexrelid FROM pg_index"
            " WHERE indrelid = ANY(%s::regclass[]))",
            (list(image.analyzed), sorted(emptied), sorted(emptied)),
        )
    for table, data, _ in image.rows:
        if table in emptied:
            with conn.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                copy.write(data)
    for sequence, value, called in image.sequences:
        conn.execute("SELECT setval(%s::regclass, %s, %s)", (sequence, value, called))
    conn.commit()
    # The counters start from nothing, as a fresh clone's: this session's own writes
    # above are flushed (at its next idle moment) before the reset, not after it.
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    conn.execute("SELECT pg_stat_reset()")
    conn.commit()
    return True
