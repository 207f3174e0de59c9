"""Job dependencies (ADR 0032) on Postgres, shared by the canonical and queue-storage
engines: the parents an insert names (locked against finishing), the edges it stores,
and the children a finishing transaction releases or cancels. Each call runs on the
caller's connection, inside the transaction of the insert or of the finish."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from awa.adapters._pg.sql import load_queries
from awa.domain import batches, dependencies
from awa.domain.dependencies import DependentOutcome, Plan
from awa.domain.job import JobRecord, JobSpec
from awa.domain.kind_policies import ChangeJob
from awa.domain.states import JobState

Connection = psycopg.AsyncConnection[Any]


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "dependencies.sql")[name].encode()


async def _rows(conn: Connection, name: str, params: dict[str, Any]) -> list[Any]:
    cur = await conn.execute(_query(name), params)
    return list(await cur.fetchall())


def _field(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


async def _parent_states(
    conn: Connection, ids: Sequence[int], schema: str | None
) -> dict[int, JobState]:
    """The state of each of ``ids`` that is a job (``failed`` for one held in the DLQ),
    as an insert reads the parents it names (locked against finishing, in ``conn``'s
    transaction); an id of no job is absent. ``schema``: as for
    :func:`insert_with_parents`."""
    rows = await _rows(conn, "dependency_parents", {"ids": list(ids)})
    missing = sorted(set(ids) - {int(_field(row, "id", 0)) for row in rows})
    if missing and schema is not None:
        text = sql.SQL(_query("dependency_parents_in").decode()).format(s=sql.Identifier(schema))
        cur = await conn.execute(text, {"ids": missing})
        rows.extend(await cur.fetchall())
    return {int(_field(row, "id", 0)): JobState.parse(str(_field(row, "state", 1))) for row in rows}


async def insert_with_parents(
    conn: Connection,
    specs: Sequence[JobSpec],
    insert: Callable[[Sequence[JobSpec]], Awaitable[list[JobRecord]]],
    now: datetime,
    *,
    schema: str | None = None,
) -> list[JobRecord]:
    """Insert ``specs`` with ``insert`` (in ``conn``'s transaction); those with parents
    are planned against them first (refused, waiting or ready) and their edges stored
    after. The parents stay locked against finishing until the transaction ends.
    ``schema``: the queue-storage schema the engine writes to; parents ``awa.jobs`` does
    not show (that schema is an engine's private one) are read there."""
    if not any(spec.depends_on for spec in specs):
        return await insert(specs)
    wanted = sorted({parent for spec in specs for parent in spec.depends_on})
    states = await _parent_states(conn, wanted, schema)
    plans: list[Plan] = []
    for spec in specs:
        if spec.depends_on:
            dependencies.check_spec(spec)
            plans.append(dependencies.plan(spec, states))
        else:
            plans.append(Plan(spec, (), frozenset()))
    records = await insert([planned.spec for planned in plans])
    children: list[int] = []
    parents: list[int] = []
    satisfied: list[datetime | None] = []
    policies: list[str] = []
    waiting: list[int] = []
    pending: list[int] = []
    batch_ids: list[int] = []
    batch_sizes: list[int] = []
    for record, planned in zip(records, plans, strict=True):
        size = batches.size_of(planned.spec.metadata)
        if size is not None and planned.parents:
            batch_ids.append(record.id)
            batch_sizes.append(size)
        for parent, policy in zip(
            planned.parents, dependencies.policies_of(planned.spec), strict=True
        ):
            children.append(record.id)
            parents.append(parent)
            satisfied.append(now if parent in planned.satisfied else None)
            policies.append(str(policy))
        if planned.pending:
            waiting.append(record.id)
            pending.append(planned.pending)
    params = {
        "children": children,
        "parents": parents,
        "satisfied": satisfied,
        "policies": policies,
        "waiting": waiting,
        "pending": pending,
        "batches": batch_ids,
        "batch_sizes": batch_sizes,
    }
    await conn.execute(_query("record_dependencies"), params)
    return records


async def finished(
    conn: Connection, jobs: Iterable[tuple[int, JobState]], now: datetime
) -> tuple[ChangeJob, ...]:
    """The changes to the children waiting on ``jobs`` (id and the state an attempt's end
    left each in), decided in ``conn``'s transaction: the caller applies them there."""
    completed: list[int] = []
    failed: list[int] = []
    cancelled: list[int] = []
    for job_id, state in jobs:
        done, dead = dependencies.finished(state)
        if done:
            completed.append(job_id)
        elif dead:
            failed.append(job_id)
            if state == JobState.Cancelled:
                cancelled.append(job_id)
    if not (completed or failed):
        return ()
    params = {"completed": completed, "failed": failed, "now": now, "cancelled": cancelled}
    rows = await _rows(conn, "resolve_dependencies", params)
    answered = [
        (int(_field(row, "child_id", 0)), DependentOutcome(str(_field(row, "outcome", 1))))
        for row in rows
    ]
    return dependencies.effects(answered, now)


async def deleted(conn: Connection, jobs: Sequence[tuple[int, JobState]]) -> list[int]:
    """Of ``jobs`` (each id with the state it was just deleted in, in ``conn``'s
    transaction), those that count as cancelled for their children
    (:func:`awa.domain.dependencies.deleted_parents`), which the caller answers there
    (:func:`finished`)."""
    if not jobs:
        return []
    rows = await _rows(conn, "dependency_waited_on", {"ids": [job_id for job_id, _ in jobs]})
    return dependencies.deleted_parents(jobs, {int(_field(row, "id", 0)) for row in rows})


async def vanished(
    conn: Connection,
    *,
    after: int,
    limit: int,
    now: datetime,
    seen_before: datetime,
    schema: str | None = None,
) -> tuple[int | None, list[int]]:
    """One bounded step of the search for parents that left without finishing while a
    child still waits on them (ADR 0032, "A parent that vanishes"), in ``conn``'s
    transaction, under the shared storage-transition lock (no step of a move between
    engines runs meanwhile). Reads a page of at most ``limit`` parents of unresolved
    edges after parent id ``after``, and records those no engine holds as seen ``now``
    (a sighting of one found again is forgotten). Then takes out the recorded parents due
    an answer: those a ``DELETE`` on ``awa.jobs`` recorded, and those first seen gone at
    or before ``seen_before`` (an earlier run); each is read again, and those still gone
    are answered. Answers where the next step starts (``None``: the page was short, start
    again from the first parent) and the parents to answer as cancelled, which the caller
    does in this transaction (:func:`finished`). ``schema``: as for
    :func:`insert_with_parents`."""
    await conn.execute(_query("lock_transitions_shared"))
    rows = await _rows(conn, "unresolved_parents", {"after": after, "limit": limit})
    page = [int(_field(row, "parent_id", 0)) for row in rows]
    present = await _parent_states(conn, page, schema) if page else {}
    absent = [parent for parent in page if parent not in present]
    params = {"present": sorted(present), "absent": absent, "now": now}
    await conn.execute(_query("vanished_seen"), params)
    rows = await _rows(conn, "vanished_due", {"seen_before": seen_before, "limit": limit})
    due = sorted(int(_field(row, "parent_id", 0)) for row in rows)
    found = await _parent_states(conn, due, schema) if due else {}
    following = page[-1] if page and len(page) == limit else None
    return following, [parent for parent in due if parent not in found]


async def retried(
    conn: Connection,
    job_ids: Sequence[int],
    restore: Callable[[Sequence[ChangeJob]], Awaitable[list[int]]],
    now: datetime,
) -> None:
    """Bring back to waiting the jobs the failure of ``job_ids`` (just retried by an
    operator or from the DLQ) held, level by level, in ``conn``'s transaction:
    ``restore`` applies the changes and answers the jobs it changed (a job no longer
    cancelled, such as one in the DLQ, is left as it is, and so are the jobs waiting on
    it)."""
    frontier = list(job_ids)
    restored: list[int] = []
    while frontier:
        rows = await _rows(conn, "dependency_retried", {"ids": frontier, "restored": restored})
        held = [(int(_field(row, "child_id", 0)), DependentOutcome.RESTORED) for row in rows]
        frontier = restored = await restore(dependencies.effects(held, now)) if held else []


#: SQLSTATE of ``awa.satisfy_dependencies`` when a completion that commits on its own
#: statement would release a waiting job: nothing was written, and the engine completes
#: the jobs again in a transaction that applies the release.
RELEASE_NEEDS_TRANSACTION = "AWD01"


def needs_transaction(exc: psycopg.Error) -> bool:
    """Whether ``exc`` is :data:`RELEASE_NEEDS_TRANSACTION`."""
    return exc.sqlstate == RELEASE_NEEDS_TRANSACTION


def released(children: Iterable[int], now: datetime) -> tuple[ChangeJob, ...]:
    """The changes to ``children`` that ``awa.satisfy_dependencies`` answered released
    (their last parent completed), for the caller to apply in the same transaction."""
    return dependencies.effects([(c, DependentOutcome.RELEASED) for c in children], now)
