"""``awa.Workflow`` through the client (ADR 0032): a fan-out/fan-in graph inserted in one
transaction runs parents first and the join last; inside the caller's transaction it
commits or rolls back with it; a cycle is refused before anything is written; the
blocking twin inserts the same graph."""

from __future__ import annotations

import attrs
import pytest

import awa
import awa.testing
from awa.adapters._pg.results import PgResultStore
from awa.domain.errors import ValidationError
from awa.domain.states import JobState

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@attrs.frozen
class Part:
    n: int


@attrs.frozen
class Join:
    parts: int


@attrs.frozen
class Fetch:
    source: str


async def test_a_fan_out_fan_in_workflow_runs_the_join_last(migrated_database_url: str) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:
        ran: list[str] = []

        @client.task(Part)
        async def part(job: awa.Job[Part]) -> None:
            ran.append(f"part {job.args.n}")

        @client.task(Join)
        async def join(job: awa.Job[Join]) -> None:
            ran.append("join")

        wf = awa.Workflow()
        # The join is added first, naming parts added after it.
        wf.add(Join(3), name="join", queue="wf", depends_on=["p1", "p2", "p3"])
        for n in (1, 2, 3):
            wf.add(Part(n), name=f"p{n}", queue="wf")
        jobs = await wf.insert(client)
        assert list(jobs) == ["join", "p1", "p2", "p3"]
        assert jobs["join"].state == JobState.Scheduled
        assert [jobs[f"p{n}"].state for n in (1, 2, 3)] == [JobState.Available] * 3
        results = await awa.testing.drain(client, "wf")
        assert all(r.is_completed() for r in results)
        assert ran == ["part 1", "part 2", "part 3", "join"]

        # In the caller's transaction: rolled back with it.
        rolled = awa.Workflow()
        a = rolled.add(Part(10), queue="wf_rolled")
        rolled.add(Join(1), queue="wf_rolled", depends_on=[a])
        with pytest.raises(RuntimeError, match="caller gives up"):
            async with await client.transaction() as tx:
                await rolled.insert(tx)
                raise RuntimeError("caller gives up")
        assert await awa.testing.drain(client, "wf_rolled") == []

        cyclic = awa.Workflow()
        cyclic.add(Part(1), name="x", queue="wf_cycle", depends_on=["y"])
        cyclic.add(Part(2), name="y", queue="wf_cycle", depends_on=["x"])
        with pytest.raises(ValidationError, match="form a cycle"):
            await cyclic.insert(client)
        assert await awa.testing.drain(client, "wf_cycle") == []
        with pytest.raises(TypeError, match="AsyncClient or a Transaction"):
            await rolled.insert(object())
    finally:
        await client.close()


def test_the_blocking_twin_inserts_the_graph(migrated_database_url: str) -> None:
    client = awa.Client(migrated_database_url)
    try:
        wf = awa.Workflow()
        first = wf.add(Part(1), queue="wf_sync")
        wf.add(Join(1), name="join", queue="wf_sync", depends_on=[first])
        jobs = wf.insert_sync(client)
        assert (jobs["step-1"].state, jobs["join"].state) == (
            JobState.Available,
            JobState.Scheduled,
        )
        with client.transaction() as tx:
            again = awa.Workflow()
            again.add(Part(2), queue="wf_sync", depends_on=[jobs["step-1"]])
            (only,) = again.insert_sync(tx).values()
        assert only.state == JobState.Scheduled
    finally:
        client.close()


async def test_step_policies_decide_what_a_failed_parent_does(migrated_database_url: str) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:
        ran: list[str] = []

        @client.task(Part)
        async def part(job: awa.Job[Part]) -> None:
            if job.args.n == 0:
                raise awa.TerminalError("part 0 is broken")
            ran.append(f"part {job.args.n}")

        @client.task(Join)
        async def join(job: awa.Job[Join]) -> None:
            ran.append(f"join {job.args.parts}")

        wf = awa.Workflow()
        broken = wf.add(Part(0), queue="wf_policy")
        fine = wf.add(Part(1), queue="wf_policy")
        wf.add(
            Join(1),
            name="report",
            queue="wf_policy",
            depends_on=[broken, fine],
            on_parent_failure="run",
        )
        wf.add(Join(2), name="strict", queue="wf_policy", depends_on=[fine, broken])
        wf.add(
            Join(3),
            name="held",
            queue="wf_policy",
            depends_on=[fine, awa.Dependency(broken, on_failure="dlq")],
        )
        with pytest.raises(ValidationError, match="on_parent_failure: must be one of"):
            wf.add(Join(4), queue="wf_policy", depends_on=[fine], on_parent_failure="skip")
        jobs = await wf.insert(client)
        await awa.testing.drain(client, "wf_policy")
        assert sorted(ran) == ["join 1", "part 1"]
        strict = await client.get_job(jobs["strict"].id)
        assert strict.state == JobState.Cancelled
        held = await client.get_dlq_job(jobs["held"].id)
        assert held is not None and held.reason == "dependency_failed"
    finally:
        await client.close()


@attrs.frozen
class Total:
    value: int


async def test_a_child_reads_its_parents_results(migrated_database_url: str) -> None:
    client = awa.AsyncClient(migrated_database_url)
    try:
        seen: list[dict[int, object]] = []

        @client.task(Part, store_result=True)
        async def part(job: awa.Job[Part]) -> Total:
            assert job.parent_results == {}
            return Total(job.args.n * 10)

        @client.task(Fetch, store_result=True)
        async def fetch(job: awa.Job[Fetch]) -> dict[str, str]:
            return {"source": job.args.source}

        @client.task(Join)
        async def join(job: awa.Job[Join]) -> None:
            seen.append(job.parent_results)

        wf = awa.Workflow()
        a = wf.add(Part(1), queue="wf_results")
        b = wf.add(Fetch("b"), queue="wf_results")
        c = wf.add(Join(0), queue="wf_results")  # stores no result
        wf.add(Join(3), name="join", queue="wf_results", depends_on=[a, b, c])
        jobs = await wf.insert(client)
        await awa.testing.drain(client, "wf_results")
        assert seen[-1] == {jobs["step-1"].id: Total(10), jobs["step-2"].id: {"source": "b"}}
        assert jobs["join"].record.metadata["awa:parents"] == [
            jobs[name].id for name in ("step-1", "step-2", "step-3")
        ]
        assert awa.Job(jobs["join"].record).parent_results == {}
    finally:
        await client.close()


async def test_a_join_reads_its_parents_results_in_one_statement(
    migrated_database_url: str,
) -> None:
    """A join's parents' results are asked for together, so the store reads them in one
    statement (a join of a hundred parents took a hundred round trips)."""
    client = awa.AsyncClient(migrated_database_url)
    try:
        seen: list[dict[int, object]] = []

        @client.task(Part, store_result=True)
        async def part(job: awa.Job[Part]) -> Total:
            return Total(job.args.n)

        @client.task(Join)
        async def join(job: awa.Job[Join]) -> None:
            seen.append(job.parent_results)

        wf = awa.Workflow()
        parts = [wf.add(Part(n), queue="wf_one_read") for n in range(8)]
        wf.add(Join(8), name="join", queue="wf_one_read", depends_on=parts)
        jobs = await wf.insert(client)
        store = (await client._control()).results
        assert isinstance(store, PgResultStore)
        statements, reads = store._reader.statements, store._reader.reads
        await awa.testing.drain(client, "wf_one_read")
        assert seen == [{jobs[f"step-{n + 1}"].id: Total(n) for n in range(8)}]
        assert (store._reader.statements - statements, store._reader.reads - reads) == (1, 8)
    finally:
        await client.close()
