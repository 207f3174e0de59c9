"""Queue stripes (``queue_storage_queue_stripe_count``) end to end on Postgres.

On queue storage a logical queue ``q`` with N stripes is stored as physical queues
``q#0 .. q#(N-1)``; producers and workers must use the fleet's count. Canonical storage
has no stripes, so there the count changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator

import psycopg
import pytest
from click.testing import CliRunner

import awa
from awa import AsyncClient, Job, JobState
from awa.entrypoints.cli import cli
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(90)]

FIELD = "queue_storage_queue_stripe_count"


@dataclasses.dataclass
class Work:
    n: int


@pytest.fixture
async def canonical(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


@pytest.fixture
async def client(canonical: AsyncClient) -> AsyncClient:
    """A client on a fresh install whose active engine is queue storage."""
    async with await canonical.transaction() as tx:
        row = await tx.fetch_one("SELECT awa.storage_auto_finalize_if_fresh('awa') AS done")
    assert row["done"] is True
    return canonical


async def _queues(client: AsyncClient) -> dict[int, str]:
    """``args.n -> physical queue`` from the public ``awa.jobs`` view."""
    async with await client.transaction() as tx:
        rows = await tx.fetch_all("SELECT queue, (args->>'n')::int AS n FROM awa.jobs")
    return {int(r["n"]): str(r["queue"]) for r in rows}


async def _more_claims(client: AsyncClient, claims: int) -> None:
    """Wait until the worker's claim loops made ``claims`` more claims: what they did
    not take by then they skipped, not missed for lack of time."""
    runtime = client._runtime
    assert runtime is not None
    start = sum(d.claim_calls for d in runtime.dispatchers)

    async def claimed() -> bool:
        return sum(d.claim_calls for d in runtime.dispatchers) >= start + claims

    await until(claimed, "claimed")


# ----------------------------------------------------------------------------- producers


async def test_copy_with_two_stripes_writes_rows_under_q0_and_q1(client: AsyncClient) -> None:
    inserted = await client.enqueue_many_copy(
        [Work(i) for i in range(6)], queue="q", queue_storage_queue_stripe_count=2
    )
    assert inserted == 6
    assert await _queues(client) == {i: f"q#{i % 2}" for i in range(6)}
    stats = {s.queue: s for s in await client.queue_stats()}
    assert set(stats) == {"q#0", "q#1"}
    assert stats["q#0"].available == 3 and stats["q#1"].available == 3
    assert {j.queue for j in await client.list_jobs(queue="q#1")} == {"q#1"}
    assert await client.list_jobs(queue="q") == []


async def test_every_producer_path_stripes_its_jobs(
    client: AsyncClient, migrated_database_url: str
) -> None:
    one = await client.insert(Work(0), queue="q", queue_storage_queue_stripe_count=2)
    two = await client.insert(Work(1), queue="q", queue_storage_queue_stripe_count=2)
    assert (one.queue, two.queue) == ("q#0", "q#1")
    assert (await client.get_job(two.id)).queue == "q#1"
    many = await client.insert_many_copy(
        [Work(2), Work(3)], queue="q", queue_storage_queue_stripe_count=2
    )
    assert [j.queue for j in many] == ["q#0", "q#1"]
    async with await client.transaction() as tx:
        in_tx = await tx.insert(Work(4), queue="q", queue_storage_queue_stripe_count=2)
        batch = await tx.insert_many(
            [Work(5), Work(6)], queue="q", queue_storage_queue_stripe_count=2
        )
    assert in_tx.queue == "q#0" and [j.queue for j in batch] == ["q#1", "q#0"]
    with awa.Client(migrated_database_url) as sync:
        first = sync.insert(Work(7), queue="s", queue_storage_queue_stripe_count=3)
        assert sync.enqueue_many_copy([Work(8)], queue="s", queue_storage_queue_stripe_count=3)
        with sync.transaction() as tx:
            tx.insert(Work(9), queue="s", queue_storage_queue_stripe_count=3)
    assert first.queue == "s#0"
    placed = await _queues(client)
    assert placed[8] == "s#1" and placed[9] == "s#2"
    assert Counter(q for n, q in placed.items() if n < 7) == {"q#0": 4, "q#1": 3}


async def test_unique_jobs_go_to_the_stripe_of_their_key_and_stay_unique(
    client: AsyncClient,
) -> None:
    unique = {"by_args": True}
    await client.enqueue_many_copy(
        [Work(200 + i) for i in range(4)],
        kind="a",
        queue="u",
        unique_opts=unique,
        queue_storage_queue_stripe_count=7,
    )
    # The placements the original implementation gives these keys.
    assert await _queues(client) == {200: "u#6", 201: "u#6", 202: "u#0", 203: "u#6"}
    # The key is the logical queue's: a duplicate is refused whatever its stripe count.
    with pytest.raises(awa.UniqueConflict):
        await client.insert(Work(200), kind="a", queue="u", unique_opts=unique)
    with pytest.raises(awa.UniqueConflict):
        await client.insert(
            Work(202), kind="a", queue="u", unique_opts=unique, queue_storage_queue_stripe_count=2
        )


async def test_one_stripe_is_not_renamed_and_stripe_names_are_refused(
    client: AsyncClient,
) -> None:
    await client.enqueue_many_copy([Work(0), Work(1)], queue="q")
    await client.enqueue_many_copy(
        [Work(2), Work(3)], queue="q", queue_storage_queue_stripe_count=1
    )
    # '#' names stripes: a producer that names one itself is refused, nothing written.
    with pytest.raises(awa.ValidationError, match="'#'"):
        await client.enqueue_many_copy(
            [Work(4), Work(5)], queue="h#5", queue_storage_queue_stripe_count=2
        )
    assert await _queues(client) == {0: "q", 1: "q", 2: "q", 3: "q"}


@pytest.mark.parametrize("bad", [0, -1, 257])
async def test_stripe_counts_out_of_range_are_refused_before_writing(
    client: AsyncClient, bad: int
) -> None:
    calls = [
        client.enqueue_many_copy([Work(0)], queue_storage_queue_stripe_count=bad),
        client.insert(Work(0), queue_storage_queue_stripe_count=bad),
        client.insert_many_copy([Work(0)], queue_storage_queue_stripe_count=bad),
    ]
    for call in calls:
        with pytest.raises(awa.ValidationError, match=FIELD) as info:
            await call
        assert info.value.field == FIELD
    async with await client.transaction() as tx:
        with pytest.raises(awa.ValidationError, match=FIELD):
            await tx.insert(Work(0), queue_storage_queue_stripe_count=bad)

    @client.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        return None

    with pytest.raises(awa.ValidationError, match=FIELD):
        await client.start([("q", 1)], queue_storage_queue_stripe_count=bad)
    assert await _queues(client) == {}


async def test_stripe_counts_of_the_wrong_type_are_refused(client: AsyncClient) -> None:
    with pytest.raises(TypeError, match=FIELD):
        await client.enqueue_many_copy([Work(0)], queue_storage_queue_stripe_count=2.0)  # type: ignore[arg-type]


async def test_canonical_storage_has_no_stripes(canonical: AsyncClient) -> None:
    await canonical.insert_many_copy(
        [Work(0), Work(1)], queue="q", queue_storage_queue_stripe_count=2
    )
    await canonical.insert(Work(2), queue="q", queue_storage_queue_stripe_count=2)
    assert await _queues(canonical) == {0: "q", 1: "q", 2: "q"}
    seen: list[str] = []

    @canonical.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        seen.append(job.queue)

    # ``start`` binds the runtime while canonical jobs exist, so the cluster stays canonical.
    await canonical.start([("q", 2)], queue_storage_queue_stripe_count=2, poll_interval_ms=50)
    try:

        async def drained() -> bool:
            return len(seen) == 3

        await until(drained, "drained")
    finally:
        await canonical.shutdown()
    assert seen == ["q", "q", "q"]


# ----------------------------------------------------------------------------- workers


async def test_a_striped_worker_drains_both_stripes_exactly_once(client: AsyncClient) -> None:
    runs: Counter[int] = Counter()
    queues: set[str] = set()
    running = 0
    peak = 0

    @client.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        runs[job.args.n] += 1
        queues.add(job.queue)
        await asyncio.sleep(0.002)  # holds the slot a moment so attempts overlap (the cap)
        running -= 1

    total = 200
    await client.enqueue_many_copy(
        [Work(i) for i in range(total // 2)], queue="q", queue_storage_queue_stripe_count=2
    )
    await client.start([("q", 3)], queue_storage_queue_stripe_count=2, poll_interval_ms=50)
    try:
        await client.enqueue_many_copy(
            [Work(i) for i in range(total // 2, total)],
            queue="q",
            queue_storage_queue_stripe_count=2,
        )

        async def done() -> bool:
            return sum(s.available + s.running for s in await client.queue_stats()) == 0 and (
                len(runs) == total
            )

        await until(done, "done")
        health = await client.health_check()
        assert set(health.queues) == {"q"} and health.queues["q"].max_workers == 3
    finally:
        await client.shutdown()
    assert runs == Counter(range(total)), "every job ran exactly once"
    assert queues == {"q#0", "q#1"}
    assert peak <= 3, "max_workers bounds the logical queue, not each stripe"
    async with await client.transaction() as tx:
        rows = await tx.fetch_all(
            "SELECT state::text AS state, count(*) AS n FROM awa.jobs GROUP BY 1"
        )
    assert {r["state"]: r["n"] for r in rows} == {"completed": total}


async def test_notifications_of_every_stripe_wake_a_striped_worker(client: AsyncClient) -> None:
    seen: list[str] = []

    @client.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        seen.append(job.queue)

    # Polling would take a minute; only the LISTEN wake-ups can deliver these in time.
    # start() returns once the LISTEN is up, so the inserts follow at once.
    await client.start([("q", 4)], queue_storage_queue_stripe_count=2, poll_interval_ms=60_000)
    try:
        await client.enqueue_many_copy(
            [Work(0), Work(1)], queue="q", queue_storage_queue_stripe_count=2
        )

        async def both() -> bool:
            return len(seen) == 2

        await until(both, "both")
    finally:
        await client.shutdown()
    assert sorted(seen) == ["q#0", "q#1"]


async def test_a_producer_with_another_stripe_count_is_kept_but_not_claimed(
    client: AsyncClient,
) -> None:
    seen: list[tuple[int, str]] = []

    @client.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        seen.append((job.args.n, job.queue))

    plain = await client.insert(Work(100), queue="q")
    await client.enqueue_many_copy(
        [Work(200), Work(201), Work(202)], queue="q", queue_storage_queue_stripe_count=3
    )
    await client.start([("q", 2)], queue_storage_queue_stripe_count=2, poll_interval_ms=50)
    try:

        async def claimed() -> bool:
            return len(seen) == 2

        await until(claimed, "claimed")
        await _more_claims(client, 8)  # every stripe looked at twice more
    finally:
        await client.shutdown()
    # The two-stripe fleet serves q#0 and q#1 only; q and q#2 wait, never lost.
    assert sorted(seen) == [(200, "q#0"), (201, "q#1")]
    assert (await client.get_job(plain.id)).state == JobState.Available
    stats = {s.queue: s.available for s in await client.queue_stats()}
    assert stats["q"] == 1 and stats["q#2"] == 1

    # A fleet with the producer's count picks them up.
    seen.clear()
    await client.start([("q", 2)], poll_interval_ms=50)
    try:

        async def plain_done() -> bool:
            return (await client.get_job(plain.id)).state == JobState.Completed

        await until(plain_done, "plain_done")
    finally:
        await client.shutdown()
    assert seen == [(100, "q")]


async def test_admin_acts_on_physical_queues(
    client: AsyncClient, migrated_database_url: str
) -> None:
    seen: list[str] = []

    @client.task(Work, queue="q")
    async def handle(job: Job[Work]) -> None:
        seen.append(job.queue)

    await client.pause_queue("q#0", paused_by="ops")
    await client.pause_queue("q")
    await client.enqueue_many_copy(
        [Work(i) for i in range(4)], queue="q", queue_storage_queue_stripe_count=2
    )
    await client.start([("q", 2)], queue_storage_queue_stripe_count=2, poll_interval_ms=50)
    try:

        async def stripe_one_done() -> bool:
            return len(seen) == 2

        # Pausing the logical name does not pause its stripes; pausing q#0 does.
        await until(stripe_one_done, "stripe_one_done")
        await _more_claims(client, 8)
        assert seen == ["q#1", "q#1"]
        stats = {s.queue: s for s in await client.queue_stats()}
        assert stats["q#0"].paused and stats["q#0"].available == 2
        assert not stats["q#1"].paused
    finally:
        await client.shutdown()
    assert await client.drain_queue("q") == 0
    assert await client.drain_queue("q#0") == 2

    # ``awa queue stats`` reports the physical queues, as queue_stats() does.
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["--database-url", migrated_database_url, "--json", "queue", "stats"],
        env={"DATABASE_URL": None},
    )
    assert result.exit_code == 0, result.stderr
    rows = {r["queue"]: r for r in json.loads(result.stdout)}
    assert {"q#0", "q#1"} <= set(rows)
    with psycopg.connect(migrated_database_url) as conn:
        paused = conn.execute("SELECT queue FROM awa.queue_meta WHERE paused").fetchall()
    assert sorted(q for (q,) in paused) == ["q", "q#0"]


async def test_a_queue_name_too_long_once_striped_is_refused(client: AsyncClient) -> None:
    """The client checks each job once, before routing; a stripe's name (``queue#k``) is
    new, so it is still checked where the route renames the job."""
    queue = "q" * 199  # valid on its own; "q...q#k" is 201 characters
    await client.insert(Work(0), queue="warm")  # the producer now knows its route
    with pytest.raises(awa.ValidationError) as single:
        await client.insert(Work(1), queue=queue, queue_storage_queue_stripe_count=4)
    with pytest.raises(awa.ValidationError) as bulk:
        await client.insert_many_copy([Work(2)], queue=queue, queue_storage_queue_stripe_count=4)
    with pytest.raises(awa.ValidationError) as copy:
        await client.enqueue_many_copy([Work(3)], queue=queue, queue_storage_queue_stripe_count=4)
    assert single.value.field == bulk.value.field == copy.value.field == "queue"
    async with await client.transaction() as tx:
        with pytest.raises(awa.ValidationError) as in_tx:
            await tx.insert(Work(4), queue=queue, queue_storage_queue_stripe_count=4)
    assert in_tx.value.field == "queue"
    assert await _queues(client) == {0: "warm"}
