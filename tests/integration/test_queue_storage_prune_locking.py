"""Queue-ring prune: it locks its slot only for the TRUNCATE, never makes readers queue
behind its lock request, and stays exact when jobs of the slot change while it works."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import anyio
import psycopg
import pytest

from awa.adapters._pg.pool import open_pool
from awa.adapters.clock import SystemClock
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage import swap as swap_module
from awa.adapters.postgres_queue_storage.snapshots import PRUNE_GATE
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import Backoff
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_prune"
QUEUE = "prune"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
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


def _slot_rows(migrated_database_url: str, slot: int) -> int:
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT "
            + " + ".join(
                f"(SELECT count(*) FROM {SCHEMA}.{t}_{slot})" for t in swap_module.RING_TABLES
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_prune_waits_for_an_operator_change_under_way(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A change of a terminal job holds the prune gate shared; prune steps back."""
    job = await _completed_job_in_next_slot(engine)
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as other:
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
    engine: QueueStorageEngine,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
) -> None:
    """Prune reads the slot's jobs before it locks the slot; a row committed into the slot
    in between makes it give up (and truncate nothing) rather than act on a stale read."""
    job = await _completed_job_in_next_slot(engine)
    read = engine._parts.queue_ring.head_states_in_slot

    async def read_then_write(conn: object, slot: int, **kwargs: object) -> object:
        heads = await read(conn, slot, **kwargs)  # type: ignore[arg-type]
        with psycopg.connect(migrated_database_url, autocommit=True) as writer:
            writer.execute(ARRIVALS[table], {"slot": slot, "job": job.id + 10_000})
        return heads

    monkeypatch.setattr(engine._parts.queue_ring, "head_states_in_slot", read_then_write)
    before = _slot_rows(migrated_database_url, 0)
    assert await engine.prune_oldest() == "blocked"
    assert _slot_rows(migrated_database_url, 0) == before + 1
    assert await engine.get_job(job.id) is not None
    monkeypatch.undo()
    assert await engine.prune_oldest() == "pruned"
    assert _slot_rows(migrated_database_url, 0) == 0


async def test_prune_lock_request_does_not_hold_up_readers(
    engine: QueueStorageEngine, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a transaction keeps the slot in use, prune retries with NOWAIT instead of
    queueing, so a reader arriving meanwhile (a claim reads every slot) gets its lock at
    once; prune finishes once the slot is free."""
    monkeypatch.setattr(swap_module, "PRUNE_NOWAIT_TRIES", 1000)
    monkeypatch.setattr(swap_module, "PRUNE_NOWAIT_PAUSE", 0.01)
    refused = anyio.Event()
    refusals = 0

    async def pause(seconds: float) -> None:
        # prune's pause after a refused NOWAIT: count them, let the test go on after two
        nonlocal refusals
        refusals += 1
        if refusals >= 2:
            refused.set()
        await anyio.sleep(seconds)

    monkeypatch.setattr(swap_module, "anyio", SimpleNamespace(sleep=pause))
    job = await _completed_job_in_next_slot(engine)
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as holder:
        await holder.execute(f"SELECT count(*) FROM {SCHEMA}.done_entries_0")  # opens a tx
        result: list[str] = []

        async def prune() -> None:
            result.append(await engine.prune_oldest())

        async with anyio.create_task_group() as tg:
            tg.start_soon(prune)
            with anyio.fail_after(10):
                await refused.wait()  # prune has been refused the slot, and tries again
            async with await psycopg.AsyncConnection.connect(
                migrated_database_url, autocommit=True
            ) as reader:
                await reader.execute("SET lock_timeout = '200ms'")
                cur = await reader.execute(f"SELECT count(*) FROM {SCHEMA}.done_entries")
                assert await cur.fetchone() is not None
            assert result == []  # prune is still waiting for the slot
            await holder.rollback()
    assert result == ["pruned"]
    assert await engine.get_job(job.id) is None


def _partition_shape(migrated_database_url: str, slot: int) -> dict[str, tuple[int, str, int]]:
    """Per ring table: the partition's oid, its bound and its number of indexes attached
    to the parent's indexes."""
    shape = {}
    with psycopg.connect(migrated_database_url) as conn:
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


def _relations(migrated_database_url: str, names: str = "%") -> dict[str, tuple[int, int, bool]]:
    """Relations of the schema named like ``names`` (tables, indexes, sequences, views):
    oid, rows (of a plain table, else 0), and whether it is a partition."""
    with psycopg.connect(migrated_database_url) as conn:
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
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The slot's partitions that hold rows change places with empty stand-ins: same
    names, same bound, every index of the ring table attached. The partition taken out
    becomes the stand-in and is emptied on the next turn. Partitions that were already
    empty are left as they are."""
    await _completed_job_in_next_slot(engine)
    before = _partition_shape(migrated_database_url, 0)
    assert await engine.prune_oldest() == "pruned"
    after = _partition_shape(migrated_database_url, 0)
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
    assert _slot_rows(migrated_database_url, 0) == 0
    stand_ins = _relations(migrated_database_url, "%%\\_0\\_spare")
    for table in swapped:
        oid, rows, partition = stand_ins[f"{table}_0_spare"]
        assert (oid, partition) == (before[table][0], False)
        assert rows > 0  # the pruned rows, until the next turn
    # The next turn empties the stand-ins first, then reclaims the oldest slot left
    # (slot 1, a rotation before the ring enters it).
    assert await engine.prune_oldest() == "pruned"
    assert all(
        rows == 0 for _, rows, _ in _relations(migrated_database_url, "%%\\_0\\_spare").values()
    )
    assert _slot_rows(migrated_database_url, 1) == 0
    # The swapped-in slot takes rows again once the ring comes round to it.
    await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
    assert await engine.rotate_queue_ring() == "rotated"
    (job,) = await engine.enqueue_many([JobSpec(kind="again", queue=QUEUE)])
    (claim,) = await engine.claim(QUEUE, limit=1)
    assert claim.job.id == job.id
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]


async def test_laps_of_the_ring_create_no_relations(
    engine: QueueStorageEngine, migrated_database_url: str
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
    first = {name: oid for name, (oid, _, _) in _relations(migrated_database_url).items()}
    await lap()
    await lap()
    again = {name: oid for name, (oid, _, _) in _relations(migrated_database_url).items()}
    assert set(again.values()) == set(first.values())
    # one stand-in per partition of the queue ring (4 slots) and of the lease ring (8)
    assert sum(name.endswith("_spare") for name in again) == len(swap_module.RING_TABLES) * 4 + 8


async def test_the_install_builds_every_stand_in_and_prune_creates_none(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Every partition of both rings has its empty stand-in, with the partition's shape,
    as soon as the schema is installed; prune only swaps them, and an install run again
    leaves them as they are."""
    stand_ins = _relations(migrated_database_url, "%%\\_spare")
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute(
            "SELECT c.relname, awa.queue_storage_relation_shape(c.oid) "
            "  = awa.queue_storage_relation_shape(to_regclass(format('%%s.%%I', %s::text, "
            "      c.relname || '_spare'))) "
            "FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relispartition "
            "  AND c.relkind = 'r'",
            (SCHEMA, SCHEMA),
        ).fetchall()
    assert len(rows) == len(stand_ins) == len(swap_module.RING_TABLES) * 4 + 8
    assert all(same for _, same in rows), [name for name, same in rows if not same]
    await _completed_job_in_next_slot(engine)
    assert await engine.prune_oldest() == "pruned"
    after = _relations(migrated_database_url, "%%\\_spare")
    assert set(after) == set(stand_ins)  # swapped, none created
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute("SELECT awa.install_queue_storage(%s, 4, 8, false)", (SCHEMA,))
    assert {
        name: oid for name, (oid, _, _) in _relations(migrated_database_url, "%%\\_spare").items()
    } == {name: oid for name, (oid, _, _) in after.items()}


def _autovacuum_off(migrated_database_url: str) -> dict[str, bool]:
    """Per plain table of the schema: whether autovacuum is switched off for it."""
    with psycopg.connect(migrated_database_url) as conn:
        rows = conn.execute(
            "SELECT c.relname, coalesce('autovacuum_enabled=false' = ANY(c.reloptions), false) "
            "FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchall()
    return {str(name): bool(off) for name, off in rows}


async def test_autovacuum_leaves_the_ring_partitions_and_their_stand_ins_alone(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """The ring's partitions and stand-ins are never vacuumed or analyzed by autovacuum
    (an ANALYZE of one made every connection plan its ring statements again), before and
    after a swap and after the install runs again; the control tables, whose rows are
    updated in place, keep it."""
    ring = {
        f"{table}_{slot}{suffix}"
        for table in swap_module.RING_TABLES
        for slot in range(4)
        for suffix in ("", "_spare")
    } | {f"leases_{slot}{suffix}" for slot in range(8) for suffix in ("", "_spare")}

    def check() -> None:
        off = _autovacuum_off(migrated_database_url)
        assert ring <= set(off)
        assert [name for name in sorted(ring) if not off[name]] == []
        assert [name for name in sorted(set(off) - ring) if off[name]] == []
        assert {"lanes", "claim_heads", "queue_counts"} <= set(off) - ring

    check()
    await _completed_job_in_next_slot(engine)
    assert await engine.prune_oldest() == "pruned"
    check()
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {SCHEMA}.claims_1 RESET (autovacuum_enabled)")
        conn.execute("SELECT awa.install_queue_storage(%s, 4, 8, false)", (SCHEMA,))
    check()


async def test_the_install_rebuilds_a_stand_in_of_another_shape(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A stand-in that no longer has its partition's shape (one built before a change of
    the ring tables) is built again by the install; the others stay, and prune swaps the
    new one in."""
    before = _relations(migrated_database_url, "%%\\_spare")
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX stale_idx ON {SCHEMA}.claims_0_spare (attempted_at)")
        conn.execute("SELECT awa.install_queue_storage(%s, 4, 8, false)", (SCHEMA,))
    after = _relations(migrated_database_url, "%%\\_spare")
    assert "stale_idx" not in _relations(migrated_database_url, "stale%%")
    assert after["claims_0_spare"][0] != before["claims_0_spare"][0]
    assert {n: v[0] for n, v in after.items() if n != "claims_0_spare"} == {
        n: v[0] for n, v in before.items() if n != "claims_0_spare"
    }
    await _completed_job_in_next_slot(engine)
    assert await engine.prune_oldest() == "pruned"
    assert (
        _relations(migrated_database_url, "claims\\_0")["claims_0"][0] == after["claims_0_spare"][0]
    )


async def test_without_its_stand_ins_a_slot_is_truncated(
    engine: QueueStorageEngine, migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A schema last installed by a release that built no stand-ins ahead still prunes:
    by TRUNCATE under the lock, with a warning that `awa migrate` builds them."""
    job = await _completed_job_in_next_slot(engine)
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {SCHEMA}.ready_entries_0_spare")
    before = _partition_shape(migrated_database_url, 0)
    with caplog.at_level("WARNING", logger="awa.adapters.postgres_queue_storage"):
        assert await engine.prune_oldest() == "pruned"
    assert "awa migrate" in caplog.text
    assert _partition_shape(migrated_database_url, 0) == before  # truncated in place
    assert _slot_rows(migrated_database_url, 0) == 0
    assert await engine.get_job(job.id) is None
    assert not engine._parts.swap.denied


async def test_where_partitions_may_not_be_swapped_prune_truncates(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A role that may write the ring but not detach or attach its partitions (it does not
    own them) still prunes: by TRUNCATE under the lock, as before the swap existed."""
    job = await _completed_job_in_next_slot(engine)
    role = f"awa_prune_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA awa, {SCHEMA} TO {role}")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE "
            f"ON ALL TABLES IN SCHEMA awa, {SCHEMA} TO {role}"
        )
        conn.execute(
            f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA awa, {SCHEMA} TO {role}"
        )
    url = psycopg.conninfo.make_conninfo(migrated_database_url, user=role)
    pool = await open_pool(url, max_connections=2)
    limited = QueueStorageEngine(pool, url, clock=SystemClock(), backoff=Backoff(), schema=SCHEMA)
    try:
        before = _partition_shape(migrated_database_url, 0)
        assert await limited.prune_oldest() == "pruned"
        assert limited._parts.swap.denied
        assert _partition_shape(migrated_database_url, 0) == before  # truncated in place
        assert _slot_rows(migrated_database_url, 0) == 0
        assert await engine.get_job(job.id) is None
    finally:
        await limited.close()
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


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
    assert await engine.retry_job(jobs[9].id) is not None
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
    assert states[jobs[0].id] == states[jobs[1].id] == states[jobs[3].id] == "completed"
    assert states[jobs[4].id] == "failed"
    assert jobs[9].id not in states and jobs[2].id not in states and jobs[5].id not in states


async def test_the_stand_ins_a_prune_swapped_out_are_emptied_by_name(
    engine: QueueStorageEngine, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog is searched for stand-ins that hold rows on a process's first turn
    (an earlier leader may have left some); after that, a turn empties the stand-ins this
    process swapped out by name, one query less at every prune."""
    statements = engine._parts.swap._sql
    searched: list[list[str]] = []
    original = statements.rows

    async def rows(conn: Any, statement: bytes, params: Any = None) -> list[dict[str, Any]]:
        if statement == statements["unclean_stand_ins"]:
            searched.append(list(params["tables"]))
        return await original(conn, statement, params)

    monkeypatch.setattr(statements, "rows", rows)
    await _completed_job_in_next_slot(engine)
    assert await engine.prune_oldest() == "pruned"
    assert searched == [list(swap_module.RING_TABLES)]
    assert any(n > 0 for _, n, _ in _relations(migrated_database_url, "%%\\_0\\_spare").values())
    await engine.prune_oldest()
    assert searched == [list(swap_module.RING_TABLES)]
    assert all(n == 0 for _, n, _ in _relations(migrated_database_url, "%%\\_0\\_spare").values())


async def test_a_stand_in_known_by_name_and_dropped_since_is_looked_up_again(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A stand-in this process swapped out can be dropped before it is emptied (an
    install that rebuilds the ring): prune goes on, and the next turn finds the others in
    the catalog and empties them."""
    await _completed_job_in_next_slot(engine)
    assert await engine.prune_oldest() == "pruned"
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {SCHEMA}.closures_0_spare")
    await engine.prune_oldest()
    await engine.prune_oldest()
    left = _relations(migrated_database_url, "%%\\_0\\_spare")
    assert "closures_0_spare" not in left
    assert {"ready_entries_0_spare", "claims_0_spare"} <= set(left)
    assert all(n == 0 for _, n, _ in left.values())


async def test_a_stand_in_left_with_rows_is_emptied_and_prune_goes_on(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """A stand-in that still holds rows this leader does not know of (another leader
    swapped it out and lost the lead before emptying it) is never swapped in; the refused
    swap makes the next turn empty it, and prune goes on."""
    job = await _completed_job_in_next_slot(engine)
    await engine._parts.swap.clear(swap_module.RING_TABLES)  # nothing to empty: all clean
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SCHEMA}.closures_0_spare SELECT * FROM {SCHEMA}.closures_0")
    assert await engine.prune_oldest() == "blocked"
    assert await engine.get_job(job.id) is not None
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(job.id) is None
    assert _slot_rows(migrated_database_url, 0) == 0


async def test_the_swap_releases_its_lock_without_waiting_for_the_flush(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    """Claims and enqueues queue behind the swap's lock until its commit; that commit does
    not wait for the WAL flush (a prune lost in a crash is simply done again)."""
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {SCHEMA}.swap_modes (mode text);"
            f"CREATE FUNCTION {SCHEMA}.note_swap_mode() RETURNS event_trigger "
            "LANGUAGE plpgsql AS $f$ BEGIN "
            f"INSERT INTO {SCHEMA}.swap_modes VALUES (current_setting('synchronous_commit')); "
            "END $f$;"
            "CREATE EVENT TRIGGER note_swap_mode ON ddl_command_end "
            f"WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION {SCHEMA}.note_swap_mode()"
        )
    try:
        await _completed_job_in_next_slot(engine)
        assert await engine.prune_oldest() == "pruned"
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            modes = {row[0] for row in conn.execute(f"SELECT mode FROM {SCHEMA}.swap_modes")}
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert modes == {"off"}
    finally:
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute("DROP EVENT TRIGGER note_swap_mode")
