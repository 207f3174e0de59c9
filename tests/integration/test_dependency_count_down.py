"""``awa.satisfy_dependencies``, the count-down every completion runs (ADR 0032, "The
fan-in's costs"): a batch of parents satisfies its edges and counts each child down by
its edges in the batch, set-wise; sibling parents finishing at once in separate
transactions release their child exactly once; a completion that commits on its own
statement (``p_release`` false) counts down but refuses a release with ``AWD01`` and
writes nothing, so the engine sends it again in a transaction.

The edges here name ids no job holds: the function reads only the dependency tables."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from awa.adapters._pg.dependencies import RELEASE_NEEDS_TRANSACTION
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

CHILD = 9_000_001
OTHER = 9_000_002


async def edges(conn: psycopg.AsyncConnection[Any], child: int, parents: list[int]) -> None:
    await conn.execute(
        "INSERT INTO awa.job_dependencies (child_id, parent_id)"
        " SELECT %s, p FROM unnest(%s::bigint[]) AS p",
        (child, parents),
    )
    await conn.execute(
        "INSERT INTO awa.job_dependency_waits (child_id, pending) VALUES (%s, %s)",
        (child, len(parents)),
    )


async def pending(conn: psycopg.AsyncConnection[Any], child: int) -> int | None:
    cur = await conn.execute(
        "SELECT pending FROM awa.job_dependency_waits WHERE child_id = %s", (child,)
    )
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def unsatisfied(conn: psycopg.AsyncConnection[Any], child: int) -> list[int]:
    cur = await conn.execute(
        "SELECT parent_id FROM awa.job_dependencies"
        " WHERE child_id = %s AND satisfied_at IS NULL ORDER BY parent_id",
        (child,),
    )
    return [int(r[0]) for r in await cur.fetchall()]


async def satisfy(
    conn: psycopg.AsyncConnection[Any], completed: list[int], release: bool
) -> list[tuple[int, str]]:
    cur = await conn.execute(
        "SELECT child_id, outcome FROM awa.satisfy_dependencies(%s::bigint[], now(), %s)",
        (completed, release),
    )
    return [(int(r[0]), str(r[1])) for r in await cur.fetchall()]


async def test_a_batch_counts_each_child_down_by_its_edges_and_releases_at_zero(
    migrated_database_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as conn:
        await edges(conn, CHILD, [1, 2, 3, 4])
        await edges(conn, OTHER, [3, 4, 5])
        # A job nobody waits on: nothing to answer, nothing raised.
        assert await satisfy(conn, [77], release=False) == []
        # Two edges of one child and one of the other, in one statement of its own.
        assert await satisfy(conn, [1, 2, 5], release=False) == []
        assert (await pending(conn, CHILD), await pending(conn, OTHER)) == (2, 2)
        assert await unsatisfied(conn, CHILD) == [3, 4]
        # The batch that would release both children refuses on its own statement, and
        # writes nothing: no edge satisfied, no count moved.
        with pytest.raises(psycopg.Error) as refused:
            await satisfy(conn, [3, 4], release=False)
        assert refused.value.sqlstate == RELEASE_NEEDS_TRANSACTION
        assert (await pending(conn, CHILD), await pending(conn, OTHER)) == (2, 2)
        assert await unsatisfied(conn, OTHER) == [3, 4]
        # In a transaction it releases both at once, each answered once.
        async with conn.transaction():
            released = await satisfy(conn, [4, 3], release=True)
        assert sorted(released) == [(CHILD, "released"), (OTHER, "released")]
        assert (await pending(conn, CHILD), await pending(conn, OTHER)) == (None, None)
        assert await unsatisfied(conn, CHILD) == await unsatisfied(conn, OTHER) == []
        # A parent completing again (a repeat) finds its edges satisfied: nothing.
        assert await satisfy(conn, [1, 3], release=True) == []


async def test_siblings_finishing_at_once_release_their_child_exactly_once(
    migrated_database_url: str,
) -> None:
    siblings = list(range(11, 19))
    answers: dict[int, list[tuple[int, str]]] = {}
    async with (
        await psycopg.AsyncConnection.connect(migrated_database_url, autocommit=True) as setup,
        await psycopg.AsyncConnection.connect(migrated_database_url) as held,
    ):
        await edges(setup, CHILD, siblings)
        # Hold the child's wait row, so every sibling's transaction satisfies its edge and
        # then queues on the row: the count-downs meet there, all at once.
        await held.execute(
            "SELECT 1 FROM awa.job_dependency_waits WHERE child_id = %s FOR UPDATE", (CHILD,)
        )

        async def finish(parent: int) -> None:
            async with (
                await psycopg.AsyncConnection.connect(migrated_database_url) as conn,
                conn.transaction(),
            ):
                answers[parent] = await satisfy(conn, [parent], release=True)

        async def queued() -> bool:
            # Read on a connection of its own: a transaction sees one snapshot of the
            # server's activity until it ends.
            cur = await setup.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                " AND query LIKE '%satisfy_dependencies%'"
            )
            row = await cur.fetchone()
            return row is not None and int(row[0]) == len(siblings)

        async with anyio.create_task_group() as tg:
            for parent in siblings:
                tg.start_soon(finish, parent)
            await until(queued, "every sibling's completion waits on the child's row")
            await held.commit()
    released = {p: a for p, a in answers.items() if a}
    assert list(released.values()) == [[(CHILD, "released")]]
    assert len(answers) == len(siblings)
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
        assert await pending(conn, CHILD) is None
        assert await unsatisfied(conn, CHILD) == []
