"""A leader stopped while prune holds its lock does not stall the fleet (issue 38).

Prune takes ACCESS EXCLUSIVE on ring tables every claim and read of the jobs touches, in
a transaction whose COMMIT is a round trip of its own. A real process is stopped
(SIGSTOP) between the lock and the COMMIT (``tests/fixtures/stuck_prune.py``); the server
ends its session once the transaction sat idle for the bound of ``maintenance_hold``
(ring.sql, 2 s), so the others' reads and claims go on, the prune rolls back, and the
next prune redoes it: no job is lost or doubled.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage import QueueStorageEngine
from awa.adapters.postgres_queue_storage.statements import run
from awa.domain.job import JobSpec
from awa.domain.states import JobState
from awa.ports.storage import Ack
from tests.support.queue_storage import installed_engine
from tests.support.waits import until_sync

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_stuck"
ROOT = Path(__file__).resolve().parents[2]
#: How long a reader may wait for the stopped prune's lock before the test gives up: far
#: above the 2 s bound, far below "until the stopped process resumes".
GIVE_UP = "8s"


@pytest.fixture
async def engine(migrated_database_url: str) -> AsyncIterator[QueueStorageEngine]:
    async with installed_engine(migrated_database_url, SCHEMA) as opened:
        yield opened


def _line(process: subprocess.Popen[str], timeout: float) -> str:
    """The next line the process prints, waiting at most ``timeout`` seconds for it."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the pruning process printed nothing"
    return process.stdout.readline().strip()


def _stopped(pid: int) -> bool:
    # /proc/PID/stat: "pid (comm) state ..."; T is stopped by a signal
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


async def test_a_prune_stopped_under_its_lock_is_cut_off_and_redone(
    engine: QueueStorageEngine, migrated_database_url: str
) -> None:
    url = migrated_database_url
    # Slot 0 holds a completed job (prune drops it) and one nobody claimed yet (prune
    # carries it into the current slot); the ring is turned so slot 0 is pruned next.
    done, waiting = await engine.enqueue_many(
        [JobSpec(kind="done", queue="finished"), JobSpec(kind="wait", queue="later")]
    )
    (claim,) = await engine.claim("finished", limit=1)
    assert await engine.complete([claim.lease]) == [Ack.APPLIED]
    assert await engine.rotate_queue_ring() == "rotated"
    for _ in range(2):
        await engine.enqueue_many([JobSpec(kind="filler", queue="other")])
        assert await engine.rotate_queue_ring() == "rotated"
    (fresh,) = await engine.enqueue_many([JobSpec(kind="fresh", queue="fresh")])

    child = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.stuck_prune", url, SCHEMA],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert _line(child, 30) == "locked"
        until_sync(lambda: _stopped(child.pid), "the prune process stopped", interval=0.01)
        stopped_at = time.monotonic()
        # Another worker reads the ring's tables and the jobs. Without the bound the read
        # waits until the stopped process resumes (here: until GIVE_UP cancels it).
        with psycopg.connect(url, autocommit=True) as reader:
            reader.execute(f"SET statement_timeout = '{GIVE_UP}'")
            reader.execute(f"SELECT count(*) FROM {SCHEMA}.ready_entries").fetchone()
            waited = time.monotonic() - stopped_at
        # ... and claims and reads go through the engine too.
        (claimed,) = await engine.claim("fresh", limit=1)
        assert claimed.job.id == fresh.id
        assert await engine.complete([claimed.lease]) == [Ack.APPLIED]
        # The stopped prune's session is gone: the server ended it, its locks with it.
        with psycopg.connect(url, autocommit=True) as probe:
            held = probe.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.mode = 'AccessExclusiveLock' AND c.relnamespace = %s::regnamespace",
                [SCHEMA],
            ).fetchone()
        assert held == (0,)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
    # Resumed, it finds its session ended by the server, and its prune undone.
    assert "error" in out and "idle-in-transaction timeout" in out, out
    print(f"the read waited {waited:.2f} s for the stopped prune")

    # Nothing of its work stayed: the slot is pruned again, the waiting job carried over
    # once, the completed one dropped.
    assert await engine.prune_oldest() == "pruned"
    assert await engine.get_job(done.id) is None
    kept = await engine.get_job(waiting.id)
    assert kept is not None and kept.state == JobState.Available
    (again,) = await engine.claim("later", limit=5)
    assert again.job.id == waiting.id
    assert await engine.complete([again.lease]) == [Ack.APPLIED]


async def test_every_ring_maintenance_transaction_bounds_its_idle_time(
    engine: QueueStorageEngine,
) -> None:
    """Rotation and prune of both rings start with ``lock_ring_state`` or
    ``lock_lease_ring_state``; emptying the stand-ins is a transaction of its own. Each
    leaves the transaction bounded, and only the transaction."""
    parts = engine._parts
    statements = parts.statements
    stand_ins = sql.Identifier(SCHEMA, "leases_0_spare")
    for statement in (
        statements["lock_ring_state"],
        statements["lock_lease_ring_state"],
        statements.render("empty_stand_ins", stand_ins=stand_ins),
    ):
        async with parts.connections.conn() as conn:
            before = await _idle_bound(conn)
            async with conn.transaction():
                await run(conn, statement)
                assert await _idle_bound(conn) == "2s", statement
            assert await _idle_bound(conn) == before, statement


async def _idle_bound(conn: DictConnection) -> str:
    cur = await conn.execute("SELECT current_setting('idle_in_transaction_session_timeout') AS t")
    row = await cur.fetchone()
    assert row is not None
    return str(row["t"])
