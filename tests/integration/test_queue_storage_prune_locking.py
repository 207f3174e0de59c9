"""Queue-ring prune: it locks its slot only for the TRUNCATE, never makes readers queue
behind its lock request, and stays exact when jobs of the slot change while it works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import psycopg
import pytest

from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage import swap as swap_module
from awa.adapters.postgres_queue_storage.snapshots import PRUNE_GATE
from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_prune"
QUEUE = "prune"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(database_url, SCHEMA) as opened:
        yield opened


async def _completed_job_in_next_slot(engine: QueueStorageEngine) -> JobRecord:
    """A completed job in slot 0, with the ring turned so slot 0 is the next to prune."""
    (job,) = await engine.enqueue_many([JobSpec(kind="done", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await engine.rotate_queue_ring() == "rotated"
    for _ in range(2):
        await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
        assert await engine.rotate_queue_ring() == "rotated"
    return job


def _slot_rows(database_url: str, slot: int) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT "
            + " + ".join(
                f"(SELECT count(*) FROM {SCHEMA}.{t}_{slot})" for t in swap_module.RING_TABLES
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_prune_waits_for_an_operator_change_under_way(
    engine: QueueStorageEngine, database_url: str
) -> None:
    """A change of a terminal job holds the prune gate shared; prune steps back."""
    job = await _completed_job_in_next_slot(engine)
    async with await psycopg.AsyncConnection.connect(database_url) as other:
        await other.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", (PRUNE_GATE, SCHEMA)
        )
        assert await engine.prune_oldest() == "blocked"
        assert await engine.get_job(job.id) is not None
        await other.commit()
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(job.id) is None


async def test_change_read_before_a_prune_is_re_read(engine: QueueStorageEngine) -> None:
    """A job read before prune dropped it is not written back: the change finds it gone."""
    job = await _completed_job_in_next_slot(engine)
    async with engine._parts.connections.tx() as conn:
        old = (await engine._parts.facts.resolve(conn, [job.id]))[job.id]
    assert await engine.prune_oldest() == "pruned"
    async with engine._parts.connections.tx() as conn:
        assert not await engine._parts.facts.supersede(conn, old, engine._clock.now())
    assert await engine.retry_job(job.id) is None
    assert await engine.get_job(job.id) is None


async def test_change_of_a_carried_failed_job_still_applies(engine: QueueStorageEngine) -> None:
    (job,) = await engine.enqueue_many([JobSpec(kind="boom", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    await engine.fail(claim.lease, error="boom")
    assert await engine.rotate_queue_ring() == "rotated"
    for _ in range(2):
        await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
        assert await engine.rotate_queue_ring() == "rotated"
    async with engine._parts.connections.tx() as conn:
        old = (await engine._parts.facts.resolve(conn, [job.id]))[job.id]
    assert await engine.prune_oldest() == "pruned"
    # Carried forward unchanged: the change read before the prune may go ahead.
    async with engine._parts.connections.tx() as conn:
        assert await engine._parts.facts.supersede(conn, old, engine._clock.now())
    retried = await engine.retry_job(job.id)
    assert retried is not None and retried.state == JobState.Available


ARRIVALS = {
    "done_entries": (
        f"INSERT INTO {SCHEMA}.done_entries (slot, fact_id, state, job_id) "
        f"VALUES (%(slot)s, nextval('{SCHEMA}.fact_seq'), NULL, %(job)s)"
    ),
    "tombstones": (
        f"INSERT INTO {SCHEMA}.tombstones (slot, ready_fact, fact_id) "
        f"VALUES (%(slot)s, -%(job)s, nextval('{SCHEMA}.fact_seq'))"
    ),
}


@pytest.mark.parametrize("table", sorted(ARRIVALS))
async def test_rows_arriving_while_prune_reads_block_it(
    engine: QueueStorageEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """Prune reads the slot's jobs before it locks the slot; a row committed into the slot
    in between makes it give up (and truncate nothing) rather than act on a stale read."""
    job = await _completed_job_in_next_slot(engine)
    read = engine._parts.queue_ring.head_states_in_slot

    async def read_then_write(conn: object, slot: int, **kwargs: object) -> object:
        heads = await read(conn, slot, **kwargs)  # type: ignore[arg-type]
        with psycopg.connect(database_url, autocommit=True) as writer:
            writer.execute(ARRIVALS[table], {"slot": slot, "job": job.id + 10_000})
        return heads

    monkeypatch.setattr(engine._parts.queue_ring, "head_states_in_slot", read_then_write)
    before = _slot_rows(database_url, 0)
    assert await engine.prune_oldest() == "blocked"
    assert _slot_rows(database_url, 0) == before + 1
    assert await engine.get_job(job.id) is not None
    monkeypatch.undo()
    assert await engine.prune_oldest() == "pruned"
    assert _slot_rows(database_url, 0) == 0


async def test_prune_lock_request_does_not_hold_up_readers(
    engine: QueueStorageEngine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a transaction keeps the slot in use, prune retries with NOWAIT instead of
    queueing, so a reader arriving meanwhile (a claim reads every slot) gets its lock at
    once; prune finishes once the slot is free."""
    monkeypatch.setattr(swap_module, "PRUNE_NOWAIT_TRIES", 1000)
    monkeypatch.setattr(swap_module, "PRUNE_NOWAIT_PAUSE", 0.01)
    job = await _completed_job_in_next_slot(engine)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute(f"SELECT count(*) FROM {SCHEMA}.done_entries_0")  # opens a tx
        result: list[str] = []

        async def prune() -> None:
            result.append(await engine.prune_oldest())

        async with anyio.create_task_group() as tg:
            tg.start_soon(prune)
            await anyio.sleep(0.3)
            async with await psycopg.AsyncConnection.connect(
                database_url, autocommit=True
            ) as reader:
                await reader.execute("SET lock_timeout = '200ms'")
                cur = await reader.execute(f"SELECT count(*) FROM {SCHEMA}.done_entries")
                assert await cur.fetchone() is not None
            assert result == []  # prune is still waiting for the slot
            await holder.rollback()
    assert result == ["pruned"]
    assert await engine.get_job(job.id) is None


def _partition_shape(database_url: str, slot: int) -> dict[str, tuple[int, str, int]]:
    """Per ring table: the partition's oid, its bound and its number of indexes attached
    to the parent's indexes."""
    shape = {}
    with psycopg.connect(database_url) as conn:
        for table in swap_module.RING_TABLES:
            row = conn.execute(
                "SELECT c.oid::bigint, pg_get_expr(c.relpartbound, c.oid), "
                "  (SELECT count(*) FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid"
                "   WHERE i.indrelid = c.oid) "
                "FROM pg_class c JOIN pg_inherits p ON p.inhrelid = c.oid "
                "WHERE c.oid = format('%%s.%%I', %s::text, %s::text)::regclass "
                "  AND p.inhparent = format('%%s.%%I', %s::text, %s::text)::regclass",
                (SCHEMA, f"{table}_{slot}", SCHEMA, table),
            ).fetchone()
            assert row is not None, table
            shape[table] = (int(row[0]), str(row[1]), int(row[2]))
    return shape


def _relations(database_url: str, names: str = "%") -> dict[str, tuple[int, int, bool]]:
    """Relations of the schema named like ``names`` (tables, indexes, sequences, views):
    oid, rows (of a plain table, else 0), and whether it is a partition."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.oid::bigint, c.relispartition, c.relkind = 'r' FROM pg_class c "
            "WHERE c.relnamespace = %s::regnamespace AND c.relname LIKE %s",
            (SCHEMA, names),
        ).fetchall()
        found = {}
        for name, oid, partition, table in rows:
            count = (
                conn.execute(f"SELECT count(*) FROM {SCHEMA}.{name}").fetchone() if table else (0,)
            )
            assert count is not None
            found[str(name)] = (int(oid), int(count[0]), bool(partition))
    return found


async def test_prune_swaps_the_slot_partitions_with_their_empty_stand_ins(
    engine: QueueStorageEngine, database_url: str
) -> None:
    """The slot's partitions that hold rows change places with empty stand-ins: same
    names, same bound, every index of the ring table attached. The partition taken out
    becomes the stand-in and is emptied on the next turn. Partitions that were already
    empty are left as they are."""
    await _completed_job_in_next_slot(engine)
    before = _partition_shape(database_url, 0)
    assert await engine.prune_oldest() == "pruned"
    after = _partition_shape(database_url, 0)
    swapped = {"ready_entries", "claims", "closures"}  # a completed job's facts
    for table in swap_module.RING_TABLES:
        old_oid, old_bound, old_indexes = before[table]
        new_oid, new_bound, new_indexes = after[table]
        assert (new_oid != old_oid) == (table in swapped), table
        assert (
            (new_bound, new_indexes)
            == (old_bound, old_indexes)
            == ("FOR VALUES IN (0)", new_indexes)
        )
        assert old_indexes > 0
    assert _slot_rows(database_url, 0) == 0
    spares = _relations(database_url, "%%\\_0\\_spare")
    for table in swapped:
        oid, rows, partition = spares[f"{table}_0_spare"]
        assert (oid, partition) == (before[table][0], False)
        assert rows > 0  # the pruned rows, until the next turn
    assert await engine.prune_oldest() == "idle"
    assert all(rows == 0 for _, rows, _ in _relations(database_url, "%%\\_spare").values())
    # The swapped-in slot takes rows again once the ring comes round to it.
    await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
    assert await engine.rotate_queue_ring() == "rotated"
    (job,) = await engine.enqueue_many([JobSpec(kind="again", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    assert claim.job.id == job.id
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]


async def test_laps_of_the_ring_create_no_relations(
    engine: QueueStorageEngine, database_url: str
) -> None:
    """Once every slot has been pruned, further laps only move the same relations
    around: no table, index or type is created or dropped every second."""

    async def lap() -> None:
        for _ in range(4):  # the test ring's slots
            await engine.enqueue_many([JobSpec(kind="lap", queue=QUEUE)])
            (claim,) = await engine.claim(QUEUE, limit=1)
            assert await engine.complete([claim.lease]) == [Ack.APPLIED]
            assert await engine.prune_oldest() in ("pruned", "idle")
            assert await engine.rotate_queue_ring() == "rotated"

    await lap()
    await lap()
    first = {name: oid for name, (oid, _, _) in _relations(database_url).items()}
    await lap()
    await lap()
    again = {name: oid for name, (oid, _, _) in _relations(database_url).items()}
    assert set(again.values()) == set(first.values())
    assert sum(name.endswith("_spare") for name in again) == len(swap_module.RING_TABLES) * 4


async def test_upgrading_the_ring_drops_prebuilt_spares(
    engine: QueueStorageEngine, database_url: str
) -> None:
    """Stand-ins built before a change of the ring tables would carry the old shape: the
    upgrade drops them and prune builds fresh ones."""
    await _completed_job_in_next_slot(engine)
    await engine._parts.swap.prepare(0)
    with psycopg.connect(database_url, autocommit=True) as conn:

        def spares() -> int:
            row = conn.execute(
                "SELECT count(*) FROM pg_class WHERE relnamespace = %s::regnamespace "
                "AND relname LIKE '%%\\_spare'",
                (SCHEMA,),
            ).fetchone()
            assert row is not None
            return int(row[0])

        assert spares() == len(swap_module.RING_TABLES)
        conn.execute("SELECT awa.queue_storage_upgrade_lean_claims(%s)", (SCHEMA,))
        assert spares() == 0
    assert await engine.prune_oldest() == "pruned"


async def test_where_partitions_may_not_be_swapped_prune_truncates(
    engine: QueueStorageEngine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role that may not create or attach partitions (no CREATE on the schema) still
    prunes: by TRUNCATE under the lock, as before the swap existed."""
    job = await _completed_job_in_next_slot(engine)

    async def refused(slot: int, tables: tuple[str, ...]) -> None:
        raise psycopg.errors.InsufficientPrivilege("permission denied for schema")

    monkeypatch.setattr(engine._parts.swap, "build", refused)
    before = _partition_shape(database_url, 0)
    assert await engine.prune_oldest() == "pruned"
    assert engine._parts.swap.denied
    assert _partition_shape(database_url, 0) == before  # truncated in place
    assert _slot_rows(database_url, 0) == 0
    assert await engine.get_job(job.id) is None


async def test_prune_resolves_the_slot_jobs_exactly_as_the_jobs_view(
    engine: QueueStorageEngine,
) -> None:
    """Prune resolves the jobs of its slot from the slot's own partitions, and only jobs
    with a fact elsewhere (an operator's retry, a deletion marker, a deferred retry,
    the DLQ) through jobs_resolved: the result is the view's, for every kind of history."""
    specs = [JobSpec(kind=f"k{i}", queue=QUEUE, max_attempts=5) for i in range(10)]
    jobs = await engine.enqueue_many(specs)
    claims = {c.job.id: c for c in await engine.claim(QUEUE, limit=10)}
    leases = [claims[job.id].lease for job in jobs]
    assert await engine.complete(leases[0:4]) == [Ack.APPLIED] * 4
    assert await engine.fail(leases[4], error="boom") == Ack.APPLIED
    assert await engine.fail(leases[5], error="boom") == Ack.APPLIED
    assert await engine.fail(leases[6], error="boom") == Ack.APPLIED
    assert await engine.retry(leases[7], error="again", delay=timedelta(hours=1)) == Ack.APPLIED
    assert await engine.snooze(leases[8], delay=timedelta(hours=1)) == Ack.APPLIED
    assert await engine.cancel_attempt(leases[9], reason="stop") == Ack.APPLIED
    (waiting,) = await engine.enqueue_many([JobSpec(kind="cancelled", queue=QUEUE)])
    assert await engine.cancel_job(waiting.id) is not None
    assert await engine.rotate_queue_ring() == "rotated"
    # Facts outside slot 0, written after it was sealed.
    assert await engine.retry_job(jobs[1].id) is not None
    assert await engine.delete_jobs([jobs[2].id]) == 1
    assert await engine.retry_job(jobs[5].id) is not None
    assert await engine.move_failed_to_dlq(jobs[6].id, reason="dead") is not None

    async with engine._parts.connections.tx() as conn:
        lean = await engine._parts.queue_ring.head_states_in_slot(conn, 0)
        ids = [job.id for job in jobs] + [waiting.id]
        cur = await conn.execute(
            engine._parts.statements["head_states_in_slot"], {"slot": 0, "ids": ids}
        )
        viewed = list(await cur.fetchall())
    assert lean == viewed
    states = {row["id"]: row["state"] for row in lean}
    assert states[jobs[0].id] == states[jobs[3].id] == "completed"
    assert states[jobs[4].id] == "failed"
    assert jobs[1].id not in states and jobs[2].id not in states and jobs[5].id not in states


async def test_a_stand_in_left_with_rows_is_emptied_and_prune_goes_on(
    engine: QueueStorageEngine, database_url: str
) -> None:
    """A stand-in that still holds rows this leader does not know of (another leader
    swapped it out and lost the lead before emptying it) is never swapped in; the refused
    swap makes the next turn empty it, and prune goes on."""
    job = await _completed_job_in_next_slot(engine)
    await engine._parts.swap.prepare(0)
    await engine._parts.swap.clear(swap_module.RING_TABLES)  # nothing to empty: all clean
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SCHEMA}.closures_0_spare SELECT * FROM {SCHEMA}.closures_0")
    assert await engine.prune_oldest() == "blocked"
    assert await engine.get_job(job.id) is not None
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(job.id) is None
    assert _slot_rows(database_url, 0) == 0
