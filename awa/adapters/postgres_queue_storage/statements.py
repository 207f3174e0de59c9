"""The engine's statements: named in ``.sql`` files, rendered once per schema, and run on
the engine's own cursors.

Every statement of the engine is a ``-- name: <name>`` entry of one of :data:`FILES`
(names are unique across them). A statement's text may hold placeholders of two forms
only, ``{word}`` and ``{entry slot=entry ...}``; ``docs/internals/sql.md`` lists what
each means in its one table (a unit test holds the statements to it), and
:meth:`Statements._expand` is the rule. In short, ``{word}`` is, by name, a slot the
including placeholder bound, one of the engine's values (``s``: the schema quoted as an
identifier; :data:`KEYLESS_LANES`, :data:`COUNT_BUCKETS`, :data:`STAMP_SLACK_MS`;
``nothing``: empty), an entry (a shared fragment, rendered in place), or else a value
given per call (:meth:`Statements.for_slot`: ``k`` and ``<table>_k``;
:meth:`Statements.render`: any other). ``{entry slot=entry ...}`` includes ``entry``
with its slots bound (to entries, or to ``nothing``); a slot is bound by every statement
that includes its entry, and an entry included inside that one sees the same slots.

``'{}'`` and other braces that begin with a digit, a quote or a space are left alone;
any other brace expression that is not one of the two forms is refused when the engine is
built. Rendering happens once, when the engine is built; a statement with per-call
placeholders is finished per call (and cached per ring slot).

Parameters are written ``%(name)s`` (``%%`` for a literal ``%``). psycopg would convert
them to ``$1, $2, ...`` on every execute unless the statement is short (it caches only
statements up to 4 KiB); the engine's hot statements (the one-statement enqueue, the
claim) are longer, and converting them again cost about a quarter of an insert's client
CPU. So :func:`run` converts each statement once (:func:`numbered`, cached, bounded by
the number of statements) and executes the result on psycopg's public raw-query cursor
(``AsyncRawCursor``, which takes ``$n`` placeholders and a sequence of parameters and
converts nothing). No library setting and no private psycopg name is used.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import AsyncCursor, AsyncRawCursor, pq, sql
from psycopg.rows import DictRow

from awa.adapters._pg.decode import fetch_decodable
from awa.adapters._pg.pool import DictConnection, is_pooled
from awa.adapters._pg.sql import load_queries
from awa.domain.validation import validate_schema_name

PACKAGE = "awa.adapters.postgres_queue_storage"
#: The engine's statement files, one beside each part that runs them (a fragment shared by
#: several parts lives with the first of them); a name is unique across all of them.
FILES = (
    "lanes.sql",
    "connections.sql",
    "enqueue.sql",
    "copy.sql",
    "facts.sql",
    "wakes.sql",
    "claim.sql",
    "finalize.sql",
    "outcomes.sql",
    "callbacks.sql",
    "sweeps.sql",
    "ring.sql",
    "carry.sql",
    "long_tx.sql",
    "admin.sql",
)

#: Lanes per ``(queue, priority)`` for jobs without an ordering key (shards -1, -2, ...;
#: an ordering key's lanes are 0 and up). A producer takes one that no other open enqueue
#: holds and opens another when all are held (ADR 0006, "Enqueue"): this bounds the lanes a
#: claim visits; beyond it concurrent producers of one queue wait for a lane.
KEYLESS_LANES = 8

#: Counter rows per (queue, state) an enqueue may spread over (``add_counts_free``).
COUNT_BUCKETS = 16

#: How far (ms) a lane's tail order key may be ahead of a producer's clock for that
#: producer's new jobs to be stamped just after the tail when they get the lane
#: (``lane_stamp``; ADR 0006, "Stamped under the lane lock"). A producer that stamped
#: its jobs before it got the lane is behind by its own wait for the lane; a tail further
#: ahead means a clock that is off, and its jobs keep their stamp (the lane then needs
#: sorting) rather than being delayed by that much.
STAMP_SLACK_MS = 1000

#: The ring's partitioned tables; the queue ring's are all but ``leases``.
SLOT_TABLES = ("ready_entries", "claims", "closures", "tombstones", "done_entries", "leases")

#: Statements that delete the only stored copy of a job and return it for Python to write
#: elsewhere: a row of theirs that cannot be decoded must fail the transaction (which rolls
#: the delete back), never be skipped, or the job would be lost.
_CARRIES_ROWS = frozenset({"due_deferred", "take_deferred", "take_deferred_heads"})

#: Statements whose rows nobody reads: in pipeline mode they are queued without waiting
#: for the server.
_NO_ROWS = frozenset(
    {
        "insert_ready",
        "insert_deferred",
        "insert_done",
        "insert_deletion_markers",
        "insert_dlq",
        "unique_release",
        "add_counts",
        "add_counts_free",
        "add_completions",
        "add_completions_in",
        "notify",
        "advance_cursors",
        "prune_completions",
        "lock_lanes",
        "generic_plan_here",
        "set_room",
    }
)

#: The two placeholder forms: ``{word}`` and ``{entry slot=entry ...}`` (bindings apart by
#: white space, which may include line breaks).
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)((?:\s+[a-z_][a-z0-9_]*=[a-z_][a-z0-9_]*)*)\}")
#: A brace expression that reads as a placeholder (not ``'{}'``, an array literal such as
#: ``'{1,2}'`` or JSON): one that is not of the two forms is refused.
PLACEHOLDER_SHAPED = re.compile(r"\{(?![0-9'\"\s}])[^{}]*\}")
#: The value of ``{nothing}``: a slot an including statement leaves empty.
NOTHING = "nothing"
#: Conversions kept: more than the engine's statements (and the claim's EXPLAIN).
_CONVERSIONS_KEPT = 256

_PARAMETER = re.compile(rb"%\(([A-Za-z_][A-Za-z0-9_]*)\)s|%%|%(.)?", re.DOTALL)


@functools.lru_cache(maxsize=_CONVERSIONS_KEPT)
def numbered(statement: bytes) -> tuple[bytes, tuple[str, ...]]:
    """``statement`` with its ``%(name)s`` parameters as ``$1, $2, ...`` (one number per
    name, however often it appears) and ``%%`` as ``%``, and the names in number order.
    Any other ``%`` form is refused: the engine's statements use only these two."""
    names: dict[str, int] = {}

    def one(match: re.Match[bytes]) -> bytes:
        name = match.group(1)
        if name is None:
            if match.group(0) == b"%%":
                return b"%"
            raise psycopg.ProgrammingError(
                f"only %(name)s parameters and %% are supported, got {match.group(0)!r}"
            )
        number = names.setdefault(name.decode(), len(names) + 1)
        return b"$%d" % number

    return _PARAMETER.sub(one, statement), tuple(names)


def _ordered(names: tuple[str, ...], params: Any) -> list[Any]:
    if not isinstance(params, Mapping):
        raise TypeError(
            f"statement parameters must be a mapping by name, got {type(params).__name__}"
        )
    try:
        return [params[name] for name in names]
    except KeyError as missing:
        raise psycopg.ProgrammingError(f"query parameter missing: {missing.args[0]}") from None


#: The attribute under which a connection keeps its reused cursor (:func:`run`, ``reuse``).
_CURSOR_ATTRIBUTE = "_awa_reused_cursor"


def _cursor(conn: DictConnection, reuse: bool) -> AsyncRawCursor[DictRow]:
    """A cursor for one statement on ``conn``: with ``reuse``, outside pipeline mode, the
    one the connection keeps for statements whose rows are read before its next statement
    (a new cursor builds its adapters, and its row and parameter converters for every
    column and parameter, again: about a fifth of a claim's client CPU). In a pipeline
    each statement needs a cursor of its own, since its rows are read after the sync."""
    if reuse and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF:
        kept: AsyncRawCursor[DictRow] | None = getattr(conn, _CURSOR_ATTRIBUTE, None)
        if kept is None or kept.closed:
            kept = AsyncRawCursor(conn, row_factory=conn.row_factory)
            setattr(conn, _CURSOR_ATTRIBUTE, kept)
        return kept
    return AsyncRawCursor(conn, row_factory=conn.row_factory)


async def run(
    conn: DictConnection,
    statement: bytes,
    params: Mapping[str, Any] | None = None,
    *,
    prepare: bool | None = None,
    reuse: bool = False,
) -> AsyncCursor[DictRow]:
    """``conn.execute(statement, params, prepare=prepare)``, converted once per statement.

    With ``params`` ``None`` the statement is sent as it is, as psycopg sends one without
    parameters. On a connection through a transaction-mode pooler nothing is prepared: a
    named statement lives in one server session, and the next transaction may run on
    another. With ``reuse`` the statement runs on the cursor ``conn`` keeps
    (:func:`_cursor`): only for a caller that reads its rows before anything else runs on
    the connection."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    if prepare and is_pooled(conn):
        prepare = False
    cur = _cursor(conn, reuse)
    if params is None:
        return await cur.execute(statement, prepare=prepare)
    query, names = numbered(statement)
    return await cur.execute(query, _ordered(names, params), prepare=prepare)


#: Connections whose session plans every prepared statement generically: the engine's
#: kept connections (:meth:`Statements.plan_generically`), where
#: :meth:`Statements.run_generic` sends the statement alone.
_GENERIC_SESSIONS: weakref.WeakSet[DictConnection] = weakref.WeakSet()
#: The statements :meth:`Statements.run_generic` prepared on each such connection.
_PREPARED: weakref.WeakKeyDictionary[DictConnection, set[bytes]] = weakref.WeakKeyDictionary()


def slot_table(schema: str, table: str, slot: int, suffix: str = "") -> sql.Identifier:
    """The partition of ``table`` for ring slot ``slot`` (``suffix`` ``_spare``: its
    stand-in, so named in the catalog; ``_out``: its name while a swap moves it out)."""
    return sql.Identifier(schema, f"{table}_{slot}{suffix}")


def _bindings(text: str) -> list[tuple[str, str]]:
    """The ``slot=entry`` pairs of a placeholder's bindings."""
    return [(slot, other) for slot, other in (b.split("=") for b in text.split())]


class Statements:
    """The engine's named statements for one schema (see the module docstring)."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema_name(schema)
        raw: dict[str, str] = {}
        for filename in FILES:
            for name, text in load_queries(PACKAGE, filename).items():
                if name in raw:
                    raise ValueError(f"statement {name!r} is named twice")
                raw[name] = text
        self._raw = raw
        self._values = {
            "s": sql.Identifier(schema).as_string(),
            "keyless_lanes": str(KEYLESS_LANES),
            "count_buckets": str(COUNT_BUCKETS),
            "stamp_slack_ms": str(STAMP_SLACK_MS),
            NOTHING: "",
        }
        self._slots = self._check_forms()
        #: Entries some other entry includes (fragments); the others are statements.
        self._included = frozenset(
            word
            for text in raw.values()
            for match in _PLACEHOLDER.finditer(text)
            for word in (match.group(1), *(other for _, other in _bindings(match.group(2))))
            if word in raw
        )
        #: The schema quoted as an identifier (``{s}``).
        self.quoted_schema = self._values["s"]
        self._text = {name: self._expand(name, {}, ()) for name in raw}
        # Statements without per-call placeholders, ready to run.
        self._bytes = {
            name: text.encode()
            for name, text in self._text.items()
            if _PLACEHOLDER.search(text) is None
        }
        self._per_slot: dict[tuple[str, int], bytes] = {}
        self._filtered: dict[tuple[str, tuple[str, ...]], bytes] = {}

    def _check_forms(self) -> frozenset[str]:
        """The slot names the entries bind, once every entry is found to use the two
        forms only and no slot shadows an entry or an engine value."""
        slots: set[str] = set()
        for name, text in self._raw.items():
            for shaped in PLACEHOLDER_SHAPED.finditer(text):
                match = _PLACEHOLDER.fullmatch(shaped.group(0))
                if match is None:
                    raise ValueError(
                        f"statement {name!r}: {shaped.group(0)!r} is no placeholder form "
                        "(use {word} or {entry slot=entry ...}; docs/internals/sql.md)"
                    )
                for slot, other in _bindings(match.group(2)):
                    if match.group(1) not in self._raw:
                        raise ValueError(f"statement {name!r} binds slots of no entry")
                    if other not in self._raw and other != NOTHING:
                        raise ValueError(f"statement {name!r} binds {slot!r} to no entry")
                    slots.add(slot)
        shadowing = slots & (set(self._raw) | set(self._values))
        if shadowing:
            raise ValueError(f"slot names {sorted(shadowing)} are also entries or values")
        return frozenset(slots)

    def _expand(self, name: str, filled: Mapping[str, str], within: tuple[str, ...]) -> str:
        """The entry ``name`` rendered, its slots taken from ``filled``."""
        if name in within:
            raise ValueError(f"statement {name!r} includes itself")

        def one(match: re.Match[str]) -> str:
            word, bindings = match.group(1), match.group(2)
            if bindings:
                # An included entry sees the slots of the entry including it, and those
                # the placeholder binds.
                inner = dict(filled)
                inner.update(
                    (slot, self._expand(other, {}, (*within, name)) if other in self._raw else "")
                    for slot, other in _bindings(bindings)
                )
                return self._expand(word, inner, (*within, name))
            if word in filled:
                return filled[word]
            if word in self._values:
                return self._values[word]
            if word in self._raw:
                return self._expand(word, filled, (*within, name))
            if word in self._slots:
                top = within[0] if within else name
                if top not in self._included:
                    raise ValueError(
                        f"statement {top!r} leaves the slot {word!r} of {name!r} unbound "
                        "(bind it, to nothing when it has no part there)"
                    )
                # a fragment rendered on its own keeps its slots (it is not run so)
            return match.group(0)  # filled per call

        return _PLACEHOLDER.sub(one, self._raw[name])

    def text(self, name: str) -> str:
        """The rendered text of ``name`` (per-call placeholders still in it)."""
        return self._text[name]

    def __getitem__(self, name: str) -> bytes:
        """The statement ``name``, ready to run (one without per-call placeholders)."""
        found = self._bytes.get(name)
        if found is None:
            raise KeyError(f"no statement {name!r} without per-call placeholders")
        return found

    def for_slot(self, name: str, slot: int) -> bytes:
        """The statement ``name`` for ring slot ``slot``: its ``{k}`` and ``{<table>_k}``
        filled in."""
        key = (name, slot)
        found = self._per_slot.get(key)
        if found is None:
            values: dict[str, sql.Composable] = {"k": sql.Literal(slot)}
            for table in SLOT_TABLES:
                values[f"{table}_k"] = slot_table(self.schema, table, slot)
            found = self._per_slot[key] = self._fill(self._text[name], values)
        return found

    def render(self, name: str, **values: sql.Composable) -> bytes:
        """The statement ``name`` with its per-call placeholders filled from ``values``."""
        return self._fill(self._text[name], values)

    def filtered(self, name: str, clauses: tuple[str, ...]) -> bytes:
        """The statement ``name`` with its ``{where}`` made of the fragments ``clauses``
        joined with AND (``no_filter`` when there is none), cached per combination."""
        key = (name, clauses)
        found = self._filtered.get(key)
        if found is None:
            parts = [sql.SQL(self._text[clause]) for clause in clauses or ("no_filter",)]
            found = self._filtered[key] = self.render(name, where=sql.SQL(" AND ").join(parts))
        return found

    def fragment(self, name: str, **values: sql.Composable) -> sql.SQL:
        """:meth:`render` as a fragment to compose into another statement."""
        return sql.SQL(self.render(name, **values).decode())

    @staticmethod
    def _fill(text: str, values: Mapping[str, sql.Composable]) -> bytes:
        rendered = {word: value.as_string() for word, value in values.items()}
        missing: set[str] = set()

        def one(match: re.Match[str]) -> str:
            word = match.group(1)
            if word not in rendered:
                missing.add(word)
                return match.group(0)
            return rendered[word]

        filled = _PLACEHOLDER.sub(one, text)
        if missing:
            raise KeyError(f"statement needs values for {sorted(missing)}")
        return filled.encode()

    # ---------------------------------------------------------------- running
    async def exec(self, conn: DictConnection, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run ``name``; its rows, decoded (none for statements whose rows nobody reads, or
        while a pipeline has not synced)."""
        return await self.read(name, await self.send(conn, name, **params))

    async def send(self, conn: DictConnection, name: str, **params: Any) -> AsyncCursor[DictRow]:
        """Run ``name`` without reading its rows: in pipeline mode the statement is
        queued, and what is sent after it (``COMMIT``) travels in the same round trip;
        :meth:`read` reads them later, after the pipeline synced."""
        return await run(conn, self._bytes[name], params)

    async def read(self, name: str, cur: AsyncCursor[DictRow]) -> list[dict[str, Any]]:
        """The rows of ``name`` run on ``cur`` (:meth:`send`), decoded as :meth:`exec`
        gives them."""
        if name in _NO_ROWS:
            return []
        # In pipeline mode the result is not there yet (pgresult is None): fetching waits.
        if cur.pgresult is not None and cur.description is None:
            return []
        if name in _CARRIES_ROWS:
            return list(await cur.fetchall())
        return await fetch_decodable(cur)

    async def exec_prepared(
        self, conn: DictConnection, name: str, **params: Any
    ) -> list[dict[str, Any]]:
        """Run ``name`` as a prepared statement of ``conn``'s session (not through a
        transaction-mode pooler, :func:`run`): for the statements of a transaction that
        runs them again and again, whose plan costs about as much as their run (the
        per-key limited claim's, which read the ring through its partitioned parents);
        with ``generic_plan_here`` run first in the transaction, the plan is made once
        per connection."""
        cur = await run(conn, self._bytes[name], params, prepare=True)
        # In pipeline mode the result is not there yet (pgresult is None): fetching waits.
        if cur.pgresult is not None and cur.description is None:
            return []
        return await fetch_decodable(cur)

    async def send_prepared(
        self, conn: DictConnection, name: str, **params: Any
    ) -> AsyncCursor[DictRow]:
        """:meth:`exec_prepared` without reading the rows: in pipeline mode the statement
        is queued, and the statements sent after it travel in the same round trip; its
        rows are read later with :func:`~awa.adapters._pg.decode.fetch_decodable`."""
        return await run(conn, self._bytes[name], params, prepare=True)

    def in_slot(self, name: str, slot: int | None) -> bytes:
        """The statement ``name`` over the whole ring (``slot`` ``None``), or its form for
        ring slot ``slot``, ``<name>_in_slot``, which reads that slot's partitions by
        name (:meth:`for_slot`)."""
        return self[name] if slot is None else self.for_slot(f"{name}_in_slot", slot)

    async def exec_prepared_in(
        self, conn: DictConnection, name: str, slot: int | None, **params: Any
    ) -> list[dict[str, Any]]:
        """:meth:`exec_prepared` of :meth:`in_slot` ``(name, slot)``."""
        cur = await self.send_prepared_in(conn, name, slot, **params)
        # In pipeline mode the result is not there yet (pgresult is None): fetching waits.
        if cur.pgresult is not None and cur.description is None:
            return []
        return await fetch_decodable(cur)

    async def send_prepared_in(
        self, conn: DictConnection, name: str, slot: int | None, **params: Any
    ) -> AsyncCursor[DictRow]:
        """:meth:`send_prepared` of :meth:`in_slot` ``(name, slot)``."""
        return await run(conn, self.in_slot(name, slot), params, prepare=True)

    async def exec_filtered(
        self, conn: DictConnection, name: str, clauses: tuple[str, ...], params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Run :meth:`filtered`; its rows, decoded."""
        cur = await run(conn, self.filtered(name, clauses), params)
        return await fetch_decodable(cur) if cur.description is not None else []

    async def exec_generic(
        self, conn: DictConnection, name: str, **params: Any
    ) -> list[dict[str, Any]]:
        """Run one autocommit statement under its prepared generic plan.

        For hot statements whose custom plan costs more to make than to run (they read
        the ring through its partitioned parents, so every partition is planned again)
        and for which the server's automatic choice never settles on the generic plan.
        On a pooled connection the setting and the statement travel in one pipeline, so
        both run in one implicit transaction: the setting ends with it and the connection
        returns to the pool unchanged. A kept connection plans generically for its whole
        session."""
        return await self.run_generic(conn, self._bytes[name], params)

    async def plan_generically(self, conn: DictConnection) -> None:
        """Make ``conn``'s session plan prepared statements generically, for good. Only
        for a connection the engine keeps to itself for its hot statements (never a pooled
        one, which other statements and callers' transactions share). Nothing on a
        connection through a transaction-mode pooler: its session is not its own, and
        nothing is prepared there anyway."""
        if is_pooled(conn):
            return
        await run(conn, self._bytes["plan_generically"])
        _GENERIC_SESSIONS.add(conn)

    async def run_generic(
        self, conn: DictConnection, statement: bytes, params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """:meth:`exec_generic` for a rendered statement (:meth:`for_slot`).

        On a kept connection (:meth:`plan_generically`) the statement goes alone: one
        message, one round trip. Elsewhere the setting and the statement are sent
        together and the rows are read once the pipeline has synced, which is also one
        round trip; reading them inside it would ask the server for them first and sync
        after, two round trips (and about twice the client's CPU) per call."""
        if conn in _GENERIC_SESSIONS or is_pooled(conn):
            # Through a transaction-mode pooler the statement is not prepared, so no
            # plan setting would apply to it: it goes alone too.
            prepared = _PREPARED.setdefault(conn, set())
            if is_pooled(conn) or statement in prepared:
                cur = await run(conn, statement, params, prepare=True, reuse=True)
                return await fetch_decodable(cur)
            # Its first run on this connection: outside a pipeline psycopg sends the
            # Parse and waits for its answer before the execution, a round trip more (a
            # claim of a ring slot not yet planned there paid it, issue 39). In a
            # pipeline both go in one message, and the rows are read once it synced.
            async with conn.pipeline():
                cur = await run(conn, statement, params, prepare=True)
            prepared.add(statement)
            return await fetch_decodable(cur)
        async with conn.pipeline():
            await run(conn, self._bytes["generic_plan_here"], prepare=True)
            cur = await run(conn, statement, params, prepare=True)
        return await fetch_decodable(cur)

    async def rows(
        self, conn: DictConnection, statement: bytes, params: Any = None
    ) -> list[dict[str, Any]]:
        """Run a rendered statement (:meth:`for_slot`, :meth:`render`); all its rows."""
        cur = await run(conn, statement, params)
        return list(await cur.fetchall()) if cur.description is not None else []

    async def one(self, conn: DictConnection, statement: bytes, params: Any = None) -> Any:
        """Run a rendered statement; its first row, or ``None``."""
        rows = await self.rows(conn, statement, params)
        return rows[0] if rows else None
