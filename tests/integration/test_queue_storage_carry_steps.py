"""A backlog larger than one step is moved out of the slot prune reclaims a bounded step
at a time, each its own transaction (ADR 0006, "Carry-forward of live rows", *A step at
a time*): no job is lost or there twice between steps, FIFO per lane holds, open
attempts still finish, and the ring turns once the slot is emptied."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobRecord, JobSpec
from awa.domain.leadership import LeaseLapsed
from awa.domain.policies import Backoff
from awa.ports.storage import Ack
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import Duty, MaintenanceDuties
from tests.support.queue_storage import installed_engine
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_carry_steps"
SLOTS = 4
KEY = "awa:concurrency_key"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, queue_slot_count=SLOTS) as opened:
        yield opened


async def _seal(engine: QueueStorageEngine, rotations: int, *, prune: bool = False) -> None:
    """Rotate ``rotations`` times, a completed filler job in each slot so there is
    something to seal; with ``prune``, as the leader's ring duty does: prune (every
    step of it) before each rotation."""
    for _ in range(rotations):
        await engine.enqueue_many([JobSpec(kind="filler", queue="filler")])
        (filler,) = await engine.claim("filler", limit=1)
        assert await engine.complete([filler.lease]) == [Ack.APPLIED]
        while prune and await engine.prune_oldest(carry_batch=7) == "carried":
            pass
        assert await engine.rotate_queue_ring() == "rotated"


def _consistent(url: str, schema: str) -> dict[int, int]:
    """Each job resolves once, every state counter matches a recount of the resolved
    jobs; returns the ready rows per slot."""
    with psycopg.connect(url) as conn:
        dupes = conn.execute(
            f"SELECT id FROM {schema}.jobs_resolved GROUP BY id HAVING count(*) > 1"
        ).fetchall()
        counters = conn.execute(
            f"SELECT queue, state::text, sum(n) FROM {schema}.queue_counts "
            "GROUP BY 1, 2 HAVING sum(n) <> 0"
        ).fetchall()
        recount = conn.execute(
            f"SELECT queue, state::text, count(*) FROM {schema}.jobs_resolved GROUP BY 1, 2"
        ).fetchall()
        # the same unclaimed fact in two slots would be claimable twice
        twice = conn.execute(
            f"SELECT fact_id FROM {schema}.ready_entries GROUP BY fact_id HAVING count(*) > 1"
        ).fetchall()
        slots = conn.execute(
            f"SELECT slot, count(*) FROM {schema}.ready_entries GROUP BY slot"
        ).fetchall()
    assert dupes == [] and twice == []
    assert {(q, s): int(n) for q, s, n in counters} == {(q, s): int(n) for q, s, n in recount}
    return {int(s): int(n) for s, n in slots}


def _lane(job: JobRecord) -> tuple[str, int, str | None]:
    return (job.queue, job.priority, (job.metadata or {}).get(KEY))


async def test_a_backlog_larger_than_the_bound_is_moved_a_step_at_a_time(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    # Keyed lanes (the per-key limit's shape), two priorities of a plain queue, and two
    # attempts left open: 62 jobs in slot 0.
    keyed = await engine.enqueue_many(
        [JobSpec(kind="k", queue="keyed", metadata={KEY: f"tenant-{i % 3}"}) for i in range(30)]
    )
    plain = await engine.enqueue_many(
        [JobSpec(kind="p", queue="plain", priority=1 + i % 2) for i in range(32)]
    )
    running = await engine.claim("keyed", limit=2)
    assert [c.job.id for c in running] == [keyed[0].id, keyed[1].id]
    await _seal(engine, 2)  # slot 0 is now the one the prune reclaims (current + 2)
    assert _consistent(migrated_database_url, SCHEMA)[0] == 63

    outcomes: list[str] = []
    taken: list[JobRecord] = []
    left = 63
    while (outcome := await engine.prune_oldest(carry_batch=7)) == "carried":
        outcomes.append(outcome)
        slots = _consistent(migrated_database_url, SCHEMA)
        # each step moves the bound, no more, out of the slot
        assert left - slots[0] == 7
        left = slots[0]
        # claims go on between steps, over rows of both slots
        for queue in ("keyed", "plain"):
            taken.extend(c.job for c in await engine.claim(queue, limit=1))
    assert outcome == "pruned"
    # 60 unclaimed rows, 2 claimed and 7 moved a step: several steps before the slot
    # is reclaimed with what is left (at most the bound) carried under its swap
    assert len(outcomes) >= 5, outcomes
    slots = _consistent(migrated_database_url, SCHEMA)
    assert slots.get(0, 0) == 0

    # The ring turns again: into the reclaimed slot, and round.
    await _seal(engine, SLOTS, prune=True)

    # Open attempts finish; every job is claimed exactly once, each lane in FIFO order.
    assert await engine.complete([c.lease for c in running]) == [Ack.APPLIED] * 2
    for queue in ("keyed", "plain"):
        while claims := await engine.claim(queue, limit=5):
            taken.extend(c.job for c in claims)
    ids = [j.id for j in taken]
    assert Counter(ids) == Counter(j.id for j in [*keyed[2:], *plain])
    lanes: dict[tuple[str, int, str | None], list[int]] = defaultdict(list)
    for job in taken:
        lanes[_lane(job)].append(job.id)
    assert len(lanes) == 5
    for lane, order in lanes.items():
        assert order == sorted(order), lane
    _consistent(migrated_database_url, SCHEMA)


async def test_a_step_never_moves_what_fits_in_one(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A backlog no larger than the bound is carried with the swap, in one call, as
    before."""
    jobs = await engine.enqueue_many([JobSpec(kind="k", queue="q") for _ in range(7)])
    await _seal(engine, 2)
    assert await engine.prune_oldest(carry_batch=7) == "pruned"
    assert _consistent(migrated_database_url, SCHEMA).get(0, 0) == 0
    claims = await engine.claim("q", limit=10)
    assert [c.job.id for c in claims] == [j.id for j in jobs]


async def test_the_bound_is_checked(engine: QueueStorageEngine) -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="carry_batch"):
            await engine.prune_oldest(carry_batch=bad)  # type: ignore[arg-type]


async def test_the_ring_duty_stops_between_steps_and_the_next_leader_goes_on(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The leader's ring duty does one bounded step a call and answers that it has more
    to do; its lease lapsing between two steps stops it with the slot half moved and
    nothing lost, and the next leader's duty carries on until the slot is reclaimed."""
    jobs = await engine.enqueue_many([JobSpec(kind="k", queue="q") for _ in range(40)])
    await _seal(engine, 2)
    config = parse_start_args(None, handler_queues={"q"}, queue_storage_carry_batch_size=6)
    calls = 0

    def lapsing_fence() -> None:
        nonlocal calls
        calls += 1
        # a fence before each prune and each rotation: two whole steps, a third prune
        if calls > 5:
            raise LeaseLapsed

    def ring_of(fence: Callable[[], None]) -> Duty:
        duties = MaintenanceDuties(engine, config, InFlight(), fence=fence, clock=SystemClock())
        return next(d for d in duties.schedule() if d.name == "ring")

    first = ring_of(lapsing_fence)
    assert await first.run() is True
    assert await first.run() is True
    with pytest.raises(LeaseLapsed):
        await first.run()
    # the third step's prune ran before the lease was found gone at its rotation
    assert _consistent(migrated_database_url, SCHEMA)[0] == 41 - 3 * 6

    successor = ring_of(lambda: None)
    runs = 0
    while await successor.run():
        runs += 1
        _consistent(migrated_database_url, SCHEMA)
    assert runs >= 2
    assert _consistent(migrated_database_url, SCHEMA).get(0, 0) == 0
    claims = await engine.claim("q", limit=50)
    assert [c.job.id for c in claims] == [j.id for j in jobs]


# ----------------------------------------------------------------------- awa.jobs edit


@pytest.fixture
async def default_engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    """An engine on the schema ``awa.jobs`` edits (the database's active one)."""
    opened = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff()
    )
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_awa_jobs_edit_of_a_row_moved_meanwhile_changes_nothing(
    default_engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """An ``UPDATE awa.jobs`` of an available job reads the job, then waits for its
    lane; a step of the carry moves the job's row out of its slot meanwhile. The edit
    must find the row gone and change nothing (``UPDATE 0``); retiring the fact in the
    old slot instead left the moved row claimable beside the edited one, and the job
    ran twice."""
    engine = default_engine
    url = migrated_database_url
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT slot_count FROM awa.ring_state").fetchone()
    assert row is not None
    jobs = await engine.enqueue_many([JobSpec(kind="e", queue="edited") for _ in range(10)])
    first = jobs[0]
    # the jobs' slot becomes the one the prune reclaims (current + 2)
    await _seal(engine, int(row[0]) - 2)

    # The lane the edit's new snapshot goes to (shard 0 of an unsharded queue), made as
    # the edit itself would make it.
    lane = ("edited", first.priority, 0)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.lanes (queue, priority, shard, next_seq, tail_run_at,"
            " tail_job_id, disorder_seq) VALUES (%s, %s, %s, 0, NULL, NULL, -1)"
            " ON CONFLICT DO NOTHING",
            lane,
        )
    async with await psycopg.AsyncConnection.connect(url) as holder:
        # Hold that lane: the edit reads the job, then waits here, before it looks for
        # the row's own lane and claim head.
        await holder.execute(
            "SELECT 1 FROM awa.lanes WHERE queue = %s AND priority = %s AND shard = %s FOR UPDATE",
            lane,
        )
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as editor:
            edit = asyncio.create_task(
                editor.execute(
                    "UPDATE awa.jobs SET args = '{\"edited\": true}' WHERE id = %s",
                    (first.id,),
                )
            )

            async def edit_waits() -> bool:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
                    cur = await c.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE 'UPDATE awa.jobs SET args%%'"
                    )
                    found = await cur.fetchone()
                return found is not None and found[0] == 1

            await until(edit_waits, "the edit waits for the lane")
            # One step moves the first 3 rows (the edited job's among them) ahead.
            assert await engine.prune_oldest(carry_batch=3) == "carried"
            await holder.commit()
            cur = await edit
            assert cur.rowcount == 0

    while (outcome := await engine.prune_oldest(carry_batch=3)) == "carried":
        pass
    assert outcome == "pruned"
    _consistent(url, "awa")
    claimed: list[Any] = []
    while claims := await engine.claim("edited", limit=4):
        claimed.extend(c.job for c in claims)
    assert [j.id for j in claimed] == [j.id for j in jobs]
    assert claimed[0].args == first.args
