"""Prune never waits on live work: what is live in the slot it reclaims is carried into
the current slot unchanged (ADR 0006, "Carry-forward of live rows"), and every write
racing the carry-forward lands once or is refused as stale."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest

from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobRecord, JobSpec, RunLease
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_carry"
SLOTS = 4


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, queue_slot_count=SLOTS) as opened:
        yield opened


async def _turn(engine: QueueStorageEngine, turns: int = 1) -> Counter[str]:
    """Turn the ring ``turns`` times around, with a completed filler job in every slot so
    each rotation has something to seal; returns the prune / rotate outcomes."""
    outcomes: Counter[str] = Counter()
    for _ in range(turns * SLOTS):
        await engine.enqueue_many([JobSpec(kind="filler", queue="filler")])
        (filler,) = await engine.claim("filler", limit=1)
        assert await engine.complete([filler.lease]) == [Ack.APPLIED]
        outcomes["prune:" + await engine.prune_oldest()] += 1
        outcomes[await engine.rotate_queue_ring()] += 1
    return outcomes


def _slot_rows(migrated_database_url: str) -> dict[str, dict[int, int]]:
    """Rows per ring table and slot."""
    out: dict[str, dict[int, int]] = {}
    with psycopg.connect(migrated_database_url) as conn:
        for table in ("ready_entries", "claims"):
            rows = conn.execute(
                f"SELECT slot, count(*) FROM {SCHEMA}.{table} GROUP BY slot"
            ).fetchall()
            out[table] = {int(s): int(n) for s, n in rows}
    return out


def _recount(
    migrated_database_url: str,
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Counters against a recount of the resolved jobs, per (queue, state)."""
    with psycopg.connect(migrated_database_url) as conn:
        counters = conn.execute(
            f"SELECT queue, state::text, sum(n) FROM {SCHEMA}.queue_counts "
            "GROUP BY 1, 2 HAVING sum(n) <> 0"
        ).fetchall()
        recount = conn.execute(
            f"SELECT queue, state::text, count(*) FROM {SCHEMA}.jobs_resolved GROUP BY 1, 2"
        ).fetchall()
        dupes = conn.execute(
            f"SELECT id FROM {SCHEMA}.jobs_resolved GROUP BY id HAVING count(*) > 1"
        ).fetchall()
    assert dupes == []
    return (
        {(q, s): int(n) for q, s, n in counters},
        {(q, s): int(n) for q, s, n in recount},
    )


async def _all_jobs(engine: QueueStorageEngine, ids: list[int]) -> dict[int, JobRecord]:
    out = {}
    for job_id in ids:
        job = await engine.get_job(job_id)
        assert job is not None, job_id
        out[job_id] = job
    return out


async def test_prune_reclaims_a_slot_holding_every_kind_of_live_work(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A running attempt without heartbeats, one heartbeating with progress, one waiting
    for a callback, unclaimed rows of a worked, an unworked and a paused queue, and a
    young failed job: the ring keeps turning, and each of them is exactly as it was."""
    (silent,) = await engine.enqueue_many([JobSpec(kind="long", queue="work")])
    (beating,) = await engine.enqueue_many([JobSpec(kind="long", queue="work", metadata={"m": 1})])
    (waiting,) = await engine.enqueue_many([JobSpec(kind="cb", queue="work")])
    claims = await engine.claim("work", limit=3, deadline=timedelta(hours=1))
    leases = {c.job.id: c.lease for c in claims}
    assert set(leases) == {silent.id, beating.id, waiting.id}
    assert await engine.heartbeat([leases[beating.id]]) == [Ack.APPLIED]
    assert (
        await engine.update_progress(
            leases[beating.id], progress={"done": 7}, metadata_updates={"phase": "b"}
        )
        == Ack.APPLIED
    )
    assert (
        await engine.register_callback(
            leases[waiting.id], callback_id="cb-carry", timeout=timedelta(hours=1)
        )
        == Ack.APPLIED
    )
    assert await engine.wait_for_callback(leases[waiting.id]) == Ack.APPLIED
    backlog = await engine.enqueue_many(
        [
            JobSpec(kind="b", queue=q, priority=p)
            for q in ("work", "unworked", "paused")
            for p in (3, 1, 2)
        ]
    )
    await engine.pause_queue("paused")
    (boom,) = await engine.enqueue_many([JobSpec(kind="boom", queue="failing")])
    (bc,) = await engine.claim("failing", limit=1)
    assert await engine.fail(bc.lease, error="boom") == Ack.APPLIED
    ids = [silent.id, beating.id, waiting.id, boom.id, *(j.id for j in backlog)]
    before = await _all_jobs(engine, ids)
    counts_before = _recount(migrated_database_url)

    outcomes = await _turn(engine, turns=3)

    assert outcomes["prune:pruned"] >= 2 * SLOTS and outcomes["skipped_busy"] == 0, outcomes
    assert await _all_jobs(engine, ids) == before
    # Completed filler history did not pile up: only about one turn of it is kept.
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {SCHEMA}.jobs_resolved WHERE queue = 'filler'"
        ).fetchone()
    assert row is not None and row[0] <= SLOTS
    assert _recount(migrated_database_url)[0] == _recount(migrated_database_url)[1]
    assert {k: v for k, v in counts_before[0].items() if k[0] != "filler"} == {
        k: v for k, v in _recount(migrated_database_url)[0].items() if k[0] != "filler"
    }
    # The live rows sit only in slots the ring has not reclaimed since.
    rows = _slot_rows(migrated_database_url)
    assert sum(rows["claims"].values()) >= 3

    # Everything can still finish as it would have.
    assert await engine.complete([leases[silent.id]]) == [Ack.APPLIED]
    assert await engine.complete([leases[beating.id]]) == [Ack.APPLIED]
    resolved = await engine.resolve_callback("cb-carry", action="complete")
    assert resolved.state == JobState.Completed
    for job_id in (silent.id, beating.id, waiting.id):
        job = await engine.get_job(job_id)
        assert job is not None and job.state == JobState.Completed
    # Priorities and FIFO per queue are unchanged: 1, 2, 3 in insert order.
    claimed = await engine.claim("work", limit=10)
    assert [c.job.priority for c in claimed] == [1, 2, 3]
    unworked = await engine.claim("unworked", limit=10)
    assert [c.job.id for c in unworked] == sorted(
        (j.id for j in backlog if j.queue == "unworked"),
        key=lambda i: before[i].priority,
    )
    assert await engine.claim("paused", limit=10) == []
    await engine.resume_queue("paused")
    assert len(await engine.claim("paused", limit=10)) == 3
    kept = await engine.get_job(boom.id)
    assert kept is not None and kept.state == JobState.Failed


async def test_fifo_within_a_lane_survives_many_carries(engine: QueueStorageEngine) -> None:
    jobs = await engine.enqueue_many([JobSpec(kind="f", queue="fifo") for _ in range(50)])
    # Half of them are claimed and finished between turns; the rest ride along.
    taken: list[int] = []
    outcomes: Counter[str] = Counter()
    for _ in range(5):
        claims = await engine.claim("fifo", limit=5)
        taken.extend(c.job.id for c in claims)
        assert await engine.complete([c.lease for c in claims]) == [Ack.APPLIED] * len(claims)
        outcomes += await _turn(engine)
    assert outcomes["prune:pruned"] >= 4 * SLOTS, outcomes
    while claims := await engine.claim("fifo", limit=7):
        taken.extend(c.job.id for c in claims)
        await engine.complete([c.lease for c in claims])
    assert taken == [j.id for j in jobs]


async def test_completion_by_a_receipt_from_before_the_carry_lands_once(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The worker remembers the receipt (slot, claim_id) of its claim; after the claim
    was carried into another slot the completion still lands, once."""
    (job,) = await engine.enqueue_many([JobSpec(kind="k", queue="r")])
    (claim,) = await engine.claim("r", limit=1)
    outcomes = await _turn(engine, turns=2)
    assert outcomes["prune:pruned"] >= SLOTS
    assert await engine.complete([claim.lease, claim.lease]) == [Ack.APPLIED, Ack.STALE]
    assert await engine.complete([claim.lease]) == [Ack.STALE]
    done = await engine.get_job(job.id)
    assert done is not None and done.state == JobState.Completed
    counters, recount = _recount(migrated_database_url)
    assert counters == recount


async def test_prune_carries_what_it_read_or_nothing(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A completion that commits between prune's read and its lock changes the slot's
    row counts: prune is blocked and its copies roll back (nothing is there twice)."""
    (job,) = await engine.enqueue_many([JobSpec(kind="k", queue="r")])
    (claim,) = await engine.claim("r", limit=1)
    for _ in range(SLOTS - 1):
        await engine.enqueue_many([JobSpec(kind="filler", queue="filler")])
        assert await engine.rotate_queue_ring() == "rotated"
    carry = engine._parts.carry
    original = carry.live_rows
    # opened first: opening installs, which waits for the prune transaction's locks
    other = await QueueStorageEngine.open(
        migrated_database_url, clock=SystemClock(), backoff=Backoff(), schema=SCHEMA
    )

    async def complete_meanwhile(
        conn: Any, source: int, current: int
    ) -> tuple[frozenset[int], list[tuple[int, int]]]:
        carried = await original(conn, source, current)
        assert job.id in carried[0] and [j for j, _ in carried[1]] == [job.id]
        assert await other.complete([claim.lease]) == [Ack.APPLIED]
        return carried

    carry.live_rows = complete_meanwhile  # type: ignore[method-assign]
    try:
        with anyio.fail_after(20):
            assert await engine.prune_oldest() == "blocked"
    finally:
        del carry.live_rows
        await other.close()
    counters, recount = _recount(migrated_database_url)
    assert counters == recount
    done = await engine.get_job(job.id)
    assert done is not None and done.state == JobState.Completed
    # Now the slot holds only history: the completed job goes with it, carried nowhere.
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(job.id) is None
    assert (await engine.pruned_counts())["r"]["completed"] == 1
    assert _recount(migrated_database_url)[0] == _recount(migrated_database_url)[1]


async def _race(engine: QueueStorageEngine, migrated_database_url: str, seconds: float) -> None:
    """Long attempts heartbeat, report progress, wait for callbacks, are resolved,
    completed or rescued, all while a leader rotates and prunes as fast as it can. Every
    write to an open attempt lands; each attempt ends exactly once."""
    rng = random.Random(14)
    jobs = await engine.enqueue_many([JobSpec(kind="live", queue="race") for _ in range(24)])
    claims = await engine.claim("race", limit=16, deadline=timedelta(hours=1))
    # These eight run out of time half-way and are rescued while they still write.
    doomed = await engine.claim("race", limit=8, deadline=timedelta(seconds=seconds / 2))
    assert len(claims) + len(doomed) == 24
    ended: Counter[int] = Counter()
    late: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    done = anyio.Event()
    start = time.monotonic()

    async def write(lease: RunLease, n: int) -> Ack:
        if n % 2:
            (ack,) = await engine.heartbeat([lease])
            return ack
        return await engine.update_progress(lease, progress={"n": n})

    async def attempt(lease: RunLease, index: int) -> None:
        until = start + seconds * (0.5 + 0.5 * rng.random())
        n = 0
        # Each attempt also outlives a whole turn of the ring, however slowly a loaded
        # host lets the leader go.
        while time.monotonic() < until or (
            outcomes["prune:pruned"] < SLOTS + 1 and time.monotonic() < start + 30 * seconds
        ):
            assert await write(lease, n) == Ack.APPLIED
            n += 1
            await anyio.sleep(0.05)  # paces the writes across the race; nothing waits on it
        if index % 2 == 0:
            callback = f"race-{lease.job_id}"
            ack = await engine.register_callback(
                lease, callback_id=callback, timeout=timedelta(hours=1)
            )
            assert ack == Ack.APPLIED
            assert await engine.wait_for_callback(lease) == Ack.APPLIED
            await anyio.sleep(0.05)  # parked a while as the leader turns: the race's window
            job = await engine.resolve_callback(callback, action="complete")
            assert job.state == JobState.Completed
        else:
            (ack,) = await engine.complete([lease])
            assert ack == Ack.APPLIED
        ended[lease.job_id] += 1

    async def doomed_attempt(lease: RunLease) -> None:
        n = 0
        while await write(lease, n) == Ack.APPLIED:
            n += 1
            await anyio.sleep(0.05)  # paces the writes until the deadline's rescue stops them
        (ack,) = await engine.complete([lease])
        late[ack.value] += 1

    async def rescuer() -> None:
        while not done.is_set():
            for rescued in await engine.rescue_expired_deadlines():
                ended[rescued.lease.job_id] += 1
            await anyio.sleep(0.02)  # a rescue pass's period, as a leader's would be

    async def leader() -> None:
        # The leader is another process in production: its own engine and pool.
        ring = await QueueStorageEngine.open(
            migrated_database_url, clock=SystemClock(), backoff=Backoff(), schema=SCHEMA
        )
        try:
            while not done.is_set():
                await ring.enqueue_many([JobSpec(kind="filler", queue="filler")] * 3)
                for c in await ring.claim("filler", limit=3):
                    await ring.complete([c.lease])
                outcomes["prune:" + await ring.prune_oldest()] += 1
                outcomes[await ring.rotate_queue_ring()] += 1
                outcomes["leases:" + await ring.prune_leases()] += 1
                await ring.rotate_leases()
        finally:
            await ring.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        tg.start_soon(rescuer)
        async with anyio.create_task_group() as workers:
            for index, claim in enumerate(claims):
                workers.start_soon(attempt, claim.lease, index)
            for claim in doomed:
                workers.start_soon(doomed_attempt, claim.lease)
        done.set()

    # a whole turn of the ring while every attempt was live: each was carried at least once
    assert outcomes["prune:pruned"] > SLOTS and outcomes["leases:pruned"] > 0, outcomes
    assert sorted(ended) == sorted(j.id for j in jobs)
    assert set(ended.values()) == {1}
    assert late == Counter({"stale": 8})
    for claim in claims:
        # completed history may already have been pruned with its slot
        final = await engine.get_job(claim.job.id)
        assert final is None or final.state == JobState.Completed
    pruned = (await engine.pruned_counts()).get("race", {})
    assert pruned.get("failed", 0) == 0 and pruned.get("cancelled", 0) == 0
    for claim in doomed:
        final = await engine.get_job(claim.job.id)
        assert final is not None and final.state == JobState.Retryable
        assert final.run_lease == claim.job.run_lease
    counters, recount = _recount(migrated_database_url)
    assert counters == recount


async def test_lease_writes_completions_callbacks_and_rescues_race_prune(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await _race(engine, migrated_database_url, 2.0)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_lease_writes_completions_callbacks_and_rescues_race_prune_for_60s(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    await _race(engine, migrated_database_url, 60.0)
