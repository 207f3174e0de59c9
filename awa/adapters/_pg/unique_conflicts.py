"""Unique conflict modes on Postgres (ADR 0034), for both engines.

An insert whose spec carries ``replace`` or ``debounce`` (its metadata's
``awa:unique_conflict``) first asks ``awa.unique_conflict_merge`` to merge it into the job
holding its key; if no waiting job holds it, the engine inserts the job (a debounce
waiting its window), and if that insert clashes with a concurrent one that committed
first, the merge is tried again. The rule itself is in the SQL function, which the SQL
producer ``awa.insert_job_compat`` uses too; the engine passes its own clock's time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import attrs
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from awa.adapters._pg.rows import job_from_row
from awa.adapters._pg.sql import load_queries
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobRecord, JobSpec
from awa.domain.unique_conflict import conflict_mode_of, first_run_at

#: Rounds of merge-then-insert before a clash is the caller's: a round is lost only to a
#: concurrent insert of the same key that committed in between, which the next merges.
MERGE_ROUNDS = 3

Insert = Callable[[Sequence[JobSpec]], Awaitable[list[JobRecord]]]
Atomic = Callable[[Any], AbstractAsyncContextManager[Any]]


def merging(spec: JobSpec) -> bool:
    """Whether ``spec`` merges into a waiting holder of its key (replace or debounce)."""
    return spec.unique_key is not None and conflict_mode_of(spec.metadata).merges


async def merge_into_holder(
    conn: psycopg.AsyncConnection[Any], spec: JobSpec, now: datetime, schema: str | None = None
) -> JobRecord | None:
    """The holder after it took ``spec``, or ``None`` when no waiting job holds the key.
    ``schema`` is a queue-storage engine's own schema, where the holder may be when the
    engine runs outside the schemas ``awa.jobs`` covers (``None``: canonical)."""
    query = load_queries("awa.adapters._pg", "unique_conflicts.sql")["merge_into_holder"]
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            query.encode(),
            {
                "unique_key": spec.unique_key,
                "args": Jsonb(spec.args),
                "run_at": spec.run_at,
                "priority": spec.priority,
                "tags": list(spec.tags),
                "metadata": Jsonb(spec.metadata),
                "now": now,
                "schema": schema,
            },
        )
        row = await cur.fetchone()
    return None if row is None else job_from_row(row)


async def insert_merging(
    conn: psycopg.AsyncConnection[Any],
    specs: Sequence[JobSpec],
    now: datetime,
    insert: Insert,
    atomic: Atomic,
    schema: str | None = None,
) -> list[JobRecord]:
    """Insert ``specs`` with ``insert``, merging those with a conflict mode into waiting
    holders; the records come back in the order of ``specs``. All or nothing: a spec
    whose key a job that is not waiting holds raises ``UniqueConflict`` and undoes the
    rest (``atomic(conn)`` is the engine's savepoint; ``schema`` as for
    :func:`merge_into_holder`)."""
    if not any(merging(spec) for spec in specs):
        return await insert(specs)
    async with atomic(conn):
        out: list[JobRecord | None] = [None] * len(specs)
        plain = [i for i, spec in enumerate(specs) if not merging(spec)]
        if plain:
            for i, record in zip(plain, await insert([specs[i] for i in plain]), strict=True):
                out[i] = record
        for i, spec in enumerate(specs):
            if out[i] is None:
                out[i] = await _merge_or_insert(conn, spec, now, insert, atomic, schema)
    return [record for record in out if record is not None]


async def _merge_or_insert(
    conn: psycopg.AsyncConnection[Any],
    spec: JobSpec,
    now: datetime,
    insert: Insert,
    atomic: Atomic,
    schema: str | None,
) -> JobRecord:
    mode = conflict_mode_of(spec.metadata)
    planned = attrs.evolve(spec, run_at=first_run_at(mode, spec.run_at, now))
    for round_ in range(MERGE_ROUNDS):
        merged = await merge_into_holder(conn, spec, now, schema)
        if merged is not None:
            return merged
        try:
            async with atomic(conn):
                (record,) = await insert([planned])
            return record
        except UniqueConflict:
            # The holder is not waiting (a skip, as without a mode), or a concurrent
            # insert of the key committed first: the next round merges into it.
            if round_ == MERGE_ROUNDS - 1:
                raise
    raise AssertionError("unreachable")
