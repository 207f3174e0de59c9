"""Queue-storage lease ring: heartbeats migrate forward, old lease slots are truncated,
and nothing live is lost while attempts keep heartbeating."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import psycopg
import pytest

from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.domain.job import JobSpec, RunLease
from awa.domain.policies import Backoff, PruneOutcome, RotateOutcome
from awa.domain.states import JobState
from awa.ports.maintenance import RingMaintenance
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUEUE = "lring"
SCHEMA = "qs_lease"
SLOTS = 4


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA, lease_slot_count=SLOTS) as opened:
        yield opened


def _lease_rows(migrated_database_url: str) -> dict[int, list[tuple[int, int]]]:
    """Lease rows per lease slot: (job_id, run_lease)."""
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute(
            f"SELECT lease_slot, job_id, run_lease FROM {SCHEMA}.leases ORDER BY 1, 2"
        ).fetchall()
    slots: dict[int, list[tuple[int, int]]] = {}
    for slot, job_id, run_lease in rows:
        slots.setdefault(int(slot), []).append((int(job_id), int(run_lease)))
    return slots


def _current_lease_slot(migrated_database_url: str) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(f"SELECT current_lease_slot FROM {SCHEMA}.ring_state").fetchone()
    assert row is not None
    return int(row[0])


def _slot_bytes(migrated_database_url: str, slot: int) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT pg_relation_size(%s::regclass)", (f"{SCHEMA}.leases_{slot}",)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _start(engine: QueueStorageEngine, n: int) -> list[RunLease]:
    await engine.enqueue_many([JobSpec(kind="long", queue=QUEUE) for _ in range(n)])
    claims = await engine.claim(QUEUE, limit=n)
    assert len(claims) == n
    return [claim.lease for claim in claims]


async def test_engine_is_ring_maintenance_for_both_rings(engine: QueueStorageEngine) -> None:
    assert isinstance(engine, RingMaintenance)
    # Nothing written yet: the lease ring has nothing to seal or reclaim. The outcomes
    # are the domain's enums (whose values are the words the port documents).
    assert await engine.rotate_leases() is RotateOutcome.SKIPPED_IDLE
    assert await engine.prune_leases() is PruneOutcome.IDLE


async def test_an_idle_lease_ring_is_checked_without_the_ring_state_lock(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Both lease duties run four times a second. While no lease row exists anywhere
    they only read: they neither wait for nor skip over a ring-state row lock held
    elsewhere, and they take none (a row lock would take a transaction id, whose commit
    waits for a WAL flush)."""
    with psycopg.connect(migrated_database_url) as holder:
        holder.execute(f"SELECT 1 FROM {SCHEMA}.ring_state FOR UPDATE")
        assert await engine.prune_leases() == "idle"
        assert await engine.rotate_leases() == "skipped_idle"
        holder.rollback()
    # Once a lease is written, the duties take the lock again, and say when it is held.
    leases = await _start(engine, 1)
    assert await engine.heartbeat(leases) == [Ack.APPLIED]
    with psycopg.connect(migrated_database_url) as holder:
        holder.execute(f"SELECT 1 FROM {SCHEMA}.ring_state FOR UPDATE")
        assert await engine.rotate_leases() is RotateOutcome.SKIPPED_LOCKED
        assert await engine.prune_leases() is PruneOutcome.SKIPPED_LOCKED
        holder.rollback()
    assert await engine.rotate_leases() == "rotated"
    assert await engine.complete(leases) == [Ack.APPLIED]


async def test_heartbeats_migrate_forward_and_the_old_slot_is_truncated(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    leases = await _start(engine, 3)
    keys = sorted((lease.job_id, lease.lease) for lease in leases)
    assert await engine.heartbeat(leases) == [Ack.APPLIED] * 3
    assert _lease_rows(migrated_database_url) == {0: keys}
    # A heartbeat in the current slot updates in place: still one row per attempt.
    assert await engine.heartbeat(leases) == [Ack.APPLIED] * 3
    assert _lease_rows(migrated_database_url) == {0: keys}

    assert await engine.rotate_leases() == "rotated"
    assert _current_lease_slot(migrated_database_url) == 1
    # Slot 0 is sealed but not yet the oldest: it is kept until the ring wraps to it.
    assert await engine.prune_leases() == "idle"
    # The next write of each attempt moves its row into the current slot.
    await engine.update_progress(leases[0], progress={"step": 1})
    assert await engine.heartbeat(leases[1:]) == [Ack.APPLIED] * 2
    assert _lease_rows(migrated_database_url) == {1: keys}

    # Go around the ring: each rotation enters an empty slot, each heartbeat moves on.
    for expected in (2, 3):
        assert await engine.rotate_leases() == "rotated"
        assert _current_lease_slot(migrated_database_url) == expected
        assert await engine.heartbeat(leases) == [Ack.APPLIED] * 3
        assert _lease_rows(migrated_database_url) == {expected: keys}
    # Slot 0 is the next to enter: its rows moved out long ago, only their dead versions
    # are left, and TRUNCATE takes them.
    assert _slot_bytes(migrated_database_url, 0) > 0
    assert await engine.prune_leases() == "pruned"
    assert _slot_bytes(migrated_database_url, 0) == 0
    assert await engine.rotate_leases() == "rotated"
    assert _current_lease_slot(migrated_database_url) == 0
    assert await engine.prune_leases() == "pruned"  # slot 1, same story
    assert _slot_bytes(migrated_database_url, 1) == 0
    assert _lease_rows(migrated_database_url) == {3: keys}
    job = await engine.get_job(leases[0].job_id)
    assert job is not None and job.state == JobState.Running
    assert job.progress == {"step": 1}
    assert await engine.complete(leases) == [Ack.APPLIED] * 3


async def test_an_idle_ring_turns_until_every_slot_is_truncated(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    leases = await _start(engine, 2)
    assert await engine.heartbeat(leases) == [Ack.APPLIED] * 2
    assert await engine.heartbeat(leases) == [Ack.APPLIED] * 2  # a dead version in slot 0
    assert await engine.complete(leases) == [Ack.APPLIED] * 2
    outcomes: list[str] = []
    for _ in range(2 * SLOTS):
        outcomes.append(await engine.prune_leases())
        outcomes.append(await engine.rotate_leases())
    # No lease writes any more, yet the ring went round once and truncated slot 0.
    assert outcomes.count("pruned") == 1
    assert all(_slot_bytes(migrated_database_url, slot) == 0 for slot in range(SLOTS))
    assert _lease_rows(migrated_database_url) == {}
    # Once everything is empty the ring stands still.
    assert outcomes[-2:] == ["idle", "skipped_idle"]
    for lease in leases:
        job = await engine.get_job(lease.job_id)
        assert job is not None and job.state == JobState.Completed


async def test_prune_carries_a_live_lease_forward_and_truncates_dead_ones(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    live, done = await _start(engine, 2)
    assert await engine.heartbeat([live, done]) == [Ack.APPLIED] * 2
    assert await engine.update_progress(live, progress={"step": 3}) == Ack.APPLIED
    # Closing an attempt leaves its lease row to the slot's TRUNCATE.
    assert await engine.complete([done]) == [Ack.APPLIED]
    assert len(_lease_rows(migrated_database_url)[0]) == 2
    for _ in range(SLOTS - 1):
        assert await engine.rotate_leases() == "rotated"
        # keep the current slot non-empty so the ring keeps turning
        await engine.enqueue_many([JobSpec(kind="filler", queue="filler")])
        (filler,) = await engine.claim("filler", limit=1)
        assert await engine.heartbeat([filler.lease]) == [Ack.APPLIED]
    before = await engine.get_job(live.job_id)
    assert before is not None and before.progress == {"step": 3}
    # Slot 0 is the oldest and still holds the open attempt's lease: it is moved into the
    # current slot, the closed attempt's row goes with the slot.
    current = _current_lease_slot(migrated_database_url)
    assert await engine.prune_leases() == "pruned"
    rows = _lease_rows(migrated_database_url)
    assert 0 not in rows and (live.job_id, live.lease) in rows[current]
    assert await engine.rotate_leases() == "rotated"
    after = await engine.get_job(live.job_id)
    assert after is not None and after.state == JobState.Running
    assert (after.progress, after.heartbeat_at, after.deadline_at) == (
        before.progress,
        before.heartbeat_at,
        before.deadline_at,
    )
    finished = await engine.get_job(done.job_id)
    assert finished is not None and finished.state == JobState.Completed
    assert await engine.complete([live]) == [Ack.APPLIED]
    assert await engine.complete([live]) == [Ack.STALE]


async def test_lease_prune_never_waits_for_a_writer_of_a_live_lease(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A lease writer holding an attempt's lock (mid-write) makes that prune ``blocked``
    at once; the next one carries the lease."""
    (live,) = await _start(engine, 1)
    assert await engine.heartbeat([live]) == [Ack.APPLIED]
    for _ in range(SLOTS - 1):
        assert await engine.rotate_leases() == "rotated"
        await engine.enqueue_many([JobSpec(kind="filler", queue="filler")])
        (filler,) = await engine.claim("filler", limit=1)
        assert await engine.heartbeat([filler.lease]) == [Ack.APPLIED]
    writer = await psycopg.AsyncConnection.connect(migrated_database_url)
    async with writer, writer.transaction():
        await writer.execute(
            "SELECT awa.queue_storage_lock_leases(%s, %s)", (SCHEMA, [live.job_id])
        )
        with anyio.fail_after(5):
            assert await engine.prune_leases() == "blocked"
    assert await engine.prune_leases() == "pruned"
    assert 0 not in _lease_rows(migrated_database_url)
    assert await engine.heartbeat([live]) == [Ack.APPLIED]


async def test_stale_lease_writes_change_nothing(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    (lease,) = await _start(engine, 1)
    assert await engine.heartbeat([lease]) == [Ack.APPLIED]
    assert await engine.rotate_leases() == "rotated"
    wrong = RunLease(lease.job_id, lease.lease + 1)
    assert await engine.heartbeat([wrong]) == [Ack.STALE]
    assert await engine.update_progress(wrong, progress={"x": 1}) == Ack.STALE
    # The stale writes did not move the row.
    assert _lease_rows(migrated_database_url) == {0: [(lease.job_id, lease.lease)]}
    assert await engine.complete([lease]) == [Ack.APPLIED]
    # After the close, the attempt's writes are stale and nothing is materialised again.
    assert await engine.heartbeat([lease]) == [Ack.STALE]
    assert await engine.update_progress(lease, progress={"x": 2}) == Ack.STALE
    assert (
        await engine.register_callback(lease, callback_id="cb", timeout=timedelta(seconds=5))
        == Ack.STALE
    )
    assert _lease_rows(migrated_database_url) == {0: [(lease.job_id, lease.lease)]}
    job = await engine.get_job(lease.job_id)
    assert job is not None and job.state == JobState.Completed and job.progress is None


async def test_waiting_attempt_moves_on_callback_writes_and_times_out(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    (lease,) = await _start(engine, 1)
    assert (
        await engine.register_callback(lease, callback_id="cb-1", timeout=timedelta(0))
        == Ack.APPLIED
    )
    assert await engine.wait_for_callback(lease) == Ack.APPLIED
    assert await engine.rotate_leases() == "rotated"
    # A heartbeat of a waiting attempt is refused and leaves the row where it is.
    assert await engine.heartbeat([lease]) == [Ack.STALE]
    assert list(_lease_rows(migrated_database_url)) == [0]
    job = await engine.heartbeat_callback("cb-1", timeout=timedelta(0))
    assert job.state == JobState.WaitingExternal
    assert list(_lease_rows(migrated_database_url)) == [1]
    rescued = await engine.rescue_expired_callbacks()
    assert [r.lease for r in rescued] == [lease]
    # The closed attempt's row no longer counts, for rescue nor for callbacks.
    assert await engine.rescue_expired_callbacks() == []
    with pytest.raises(Exception, match="cb-1"):
        await engine.resolve_callback("cb-1", action="complete")


async def test_existing_leases_survive_the_upgrade(migrated_database_url: str) -> None:
    """Rows written to the plain lease table before migration 0310 land in the ring."""
    url = migrated_database_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage_tables('qs_old', 4, 3, false)")
        conn.execute("SELECT awa.queue_storage_upgrade('qs_old')")
        conn.execute("SELECT awa.queue_storage_upgrade_claim_probe('qs_old')")
        # This engine's claim reads the lane mark of migration 0380.
        conn.execute("SELECT awa.queue_storage_upgrade_retire_mark('qs_old')")
        kind = conn.execute(
            "SELECT relkind::text FROM pg_class WHERE oid = 'qs_old.leases'::regclass"
        ).fetchone()
        assert kind == ("r",)
    # Not QueueStorageEngine.open: that would install (and so upgrade) the schema.
    old = QueueStorageEngine(
        await open_pool(url, max_connections=2),
        url,
        clock=SystemClock(),
        backoff=Backoff(),
        schema="qs_old",
    )
    try:
        await old.enqueue_many([JobSpec(kind="long", queue=QUEUE)])
        (claim,) = await old.claim(QUEUE, limit=1)
    finally:
        await old.close()
    with psycopg.connect(url, autocommit=True) as conn:
        # What a heartbeat wrote before the upgrade.
        conn.execute(
            "INSERT INTO qs_old.leases (job_id, run_lease, claim_slot, claim_id, queue, "
            "heartbeat_at, progress, metadata, deadline_at) "
            "SELECT job_id, run_lease, slot, claim_id, queue, now(), '{\"p\": 7}', '{}', "
            "deadline_at FROM qs_old.claims"
        )
        conn.execute("SELECT awa.queue_storage_upgrade_lease_ring('qs_old')")
        kind = conn.execute(
            "SELECT relkind::text FROM pg_class WHERE oid = 'qs_old.leases'::regclass"
        ).fetchone()
        assert kind == ("p",)
        parts = conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'qs_old.leases'::regclass"
        ).fetchone()
        assert parts == (3,)
        # Idempotent, like every upgrade step.
        conn.execute("SELECT awa.queue_storage_upgrade_lease_ring('qs_old')")
    upgraded = await QueueStorageEngine.open(
        url, clock=SystemClock(), backoff=Backoff(), schema="qs_old"
    )
    try:
        job = await upgraded.get_job(claim.job.id)
        assert job is not None and job.progress == {"p": 7}
        assert await upgraded.heartbeat([claim.lease]) == [Ack.APPLIED]
        assert await upgraded.complete([claim.lease]) == [Ack.APPLIED]
    finally:
        await upgraded.close()


async def _race(engine: QueueStorageEngine, seconds: float) -> None:
    """Long attempts heartbeating and reporting progress, short ones completing, and a
    leader rotating and pruning the lease ring (fast) and the queue ring, all at once."""
    deadline = time.monotonic() + seconds
    started: list[int] = []
    finished: Counter[int] = Counter()
    progress: dict[int, int] = {}
    outcomes: Counter[str] = Counter()

    async def worker() -> None:
        while time.monotonic() < deadline:
            await engine.enqueue_many([JobSpec(kind="w", queue=QUEUE)] * 4)
            claims = await engine.claim(QUEUE, limit=4)
            started.extend(claim.job.id for claim in claims)
            leases = [claim.lease for claim in claims]
            for step in range(3):
                assert await engine.heartbeat(leases) == [Ack.APPLIED] * len(leases)
                for lease in leases[:2]:
                    ack = await engine.update_progress(lease, progress={"step": step})
                    assert ack == Ack.APPLIED
                    progress[lease.job_id] = step
                await anyio.sleep(0.01)  # the attempt stays open while the leader turns
            for lease in leases[:2]:
                job = await engine.get_job(lease.job_id)
                assert job is not None and job.progress == {"step": progress[lease.job_id]}
            for claim, ack in zip(claims, await engine.complete(leases), strict=True):
                assert ack == Ack.APPLIED
                finished[claim.job.id] += 1
            # Closed attempts stay closed: late writes are refused.
            assert await engine.heartbeat(leases) == [Ack.STALE] * len(leases)

    async def leader() -> None:
        while time.monotonic() < deadline:
            outcomes["prune:" + await engine.prune_leases()] += 1
            outcomes[await engine.rotate_leases()] += 1
            if outcomes["rotated"] % 4 == 0:
                await engine.prune_oldest()
                await engine.rotate_queue_ring()
            await anyio.sleep(0.005)  # the leader's period in the race

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        for _ in range(3):
            tg.start_soon(worker)

    # Jobs one worker enqueued may still wait (another worker took its claims): drain.
    while claims := await engine.claim(QUEUE, limit=50):
        leases = [claim.lease for claim in claims]
        started.extend(claim.job.id for claim in claims)
        assert await engine.heartbeat(leases) == [Ack.APPLIED] * len(leases)
        for claim, ack in zip(claims, await engine.complete(leases), strict=True):
            assert ack == Ack.APPLIED
            finished[claim.job.id] += 1
    assert outcomes["rotated"] > 0 and outcomes["prune:pruned"] > 0, outcomes
    assert sorted(finished) == sorted(started)
    assert set(finished.values()) == {1}
    counts = {c.queue: c.counts for c in await engine.queue_counts()}.get(QUEUE, {})
    assert counts.get(JobState.Running, 0) == 0 and counts.get(JobState.Available, 0) == 0


async def test_heartbeats_and_completions_race_lease_rotation_and_prune(
    engine: QueueStorageEngine,
) -> None:
    await _race(engine, 3.0)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_heartbeats_and_completions_race_lease_rotation_and_prune_for_30s(
    engine: QueueStorageEngine,
) -> None:
    await _race(engine, 30.0)


def _lease_partition(migrated_database_url: str, slot: int) -> tuple[int, list[str] | None, str]:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT c.oid::bigint, c.reloptions, pg_get_expr(c.relpartbound, c.oid) "
            "FROM pg_class c WHERE c.oid = format('%%s.%%I', %s::text, %s::text)::regclass",
            (SCHEMA, f"leases_{slot}"),
        ).fetchone()
    assert row is not None
    return int(row[0]), row[1], str(row[2])


async def test_lease_prune_swaps_in_an_empty_partition_built_beforehand(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Like the queue ring, the lease ring's oldest slot is replaced by an empty partition
    built ahead of time (same name, bound and storage options), not truncated under the
    lock."""
    leases = await _start(engine, 2)
    assert await engine.heartbeat(leases) == [Ack.APPLIED] * 2
    assert await engine.complete(leases) == [Ack.APPLIED] * 2
    before = _lease_partition(migrated_database_url, 0)
    outcomes: list[str] = []
    for _ in range(2 * SLOTS):
        outcomes.append(await engine.prune_leases())
        outcomes.append(await engine.rotate_leases())
    assert outcomes.count("pruned") == 1
    after = _lease_partition(migrated_database_url, 0)
    assert after[0] != before[0]
    assert (
        after[1:]
        == before[1:]
        == (
            ["fillfactor=70", "autovacuum_enabled=false"],
            "FOR VALUES IN (0)",
        )
    )
    assert _slot_bytes(migrated_database_url, 0) == 0
    # the partition takes lease writes again when the ring comes round to it
    more = await _start(engine, 1)
    for _ in range(SLOTS):
        assert await engine.heartbeat(more) == [Ack.APPLIED]
        if _current_lease_slot(migrated_database_url) == 0:
            break
        await engine.rotate_leases()
    assert _current_lease_slot(migrated_database_url) == 0
    assert await engine.heartbeat(more) == [Ack.APPLIED]
    assert _lease_rows(migrated_database_url).get(0) == [(more[0].job_id, more[0].lease)]
