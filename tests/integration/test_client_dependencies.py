"""``insert(..., depends_on=[...])`` through the client (ADR 0032): job handles and ids
name the parents, the child waits until they completed (run by the real handlers), a
transaction's child waits too, and bad parents are refused naming the problem."""

from __future__ import annotations

import attrs
import pytest

import awa
import awa.testing
from awa.domain.dependencies import WAITING_RUN_AT
from awa.domain.errors import ValidationError
from awa.domain.states import JobState

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@attrs.frozen
class Fetch:
    n: int


@attrs.frozen
class Report:
    total: int


async def test_a_child_runs_after_its_parents_complete(migrated_database_url: str) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:
        ran: list[str] = []

        @client.task(Fetch)
        async def fetch(job: awa.Job[Fetch]) -> None:
            ran.append(f"fetch {job.args.n}")

        @client.task(Report)
        async def report(job: awa.Job[Report]) -> None:
            ran.append("report")

        first = await client.insert(Fetch(1), queue="deps")
        second = await client.insert(Fetch(2), queue="deps")
        child = await client.insert(Report(3), queue="deps", depends_on=[first, second.id])
        assert child.state == JobState.Scheduled
        assert str(child.run_at).startswith(WAITING_RUN_AT.date().isoformat())
        results = await awa.testing.drain(client, "deps")
        assert [r.is_completed() for r in results] == [True, True, True]
        assert ran == ["fetch 1", "fetch 2", "report"]

        async with await client.transaction() as tx:
            later = await tx.insert(Report(4), queue="deps", depends_on=[first])
        assert later.state == JobState.Available

        with pytest.raises(ValidationError, match="depends_on: no job with id 987654321"):
            await client.insert(Report(5), queue="deps", depends_on=[987_654_321])
        with pytest.raises(ValidationError, match="depends_on: each entry"):
            await client.insert(Report(6), queue="deps", depends_on=["x"])
    finally:
        await client.close()
