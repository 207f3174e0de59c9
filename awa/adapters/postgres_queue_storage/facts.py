"""Writing snapshots as facts: the one way every queue-storage operation changes a job.

An operation reads the job's resolved snapshot (:meth:`FactWriter.resolve`), decides the
next one, and appends the facts that express it (:meth:`FactWriter.transition`): a
tombstone or closure that supersedes the old fact, and a ready / deferred / done row (or a
DLQ row) holding the new snapshot, with the unique keys it gains or loses and the counter
moves (:meth:`FactWriter.flush`) last.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.lanes import LaneAllocator
from awa.adapters.postgres_queue_storage.snapshots import (
    DEFERRED,
    PRUNE_GATE,
    Resolved,
    Writes,
    iso,
    row_json,
)
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain.errors import UniqueConflict
from awa.domain.job import JobRecord
from awa.domain.states import LIVE_STATES, TERMINAL_STATES, JobState
from awa.domain.unique import holds_unique_key
from awa.ports.storage import JobFilter

#: Each field of a JobFilter: its parameter and the fragment of admin.sql that tests it.
_JOB_CLAUSES = (
    ("kind", "job_kind_is"),
    ("queue", "job_queue_is"),
    ("state", "job_state_is"),
    ("tag", "job_tagged"),
    ("before_id", "job_before"),
)


def job_filter(filter: JobFilter) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The WHERE clauses (fragment names) and parameters of ``filter``."""
    values = {
        "kind": filter.kind,
        "queue": filter.queue,
        "state": None if filter.state is None else filter.state.sql_name,
        "tag": filter.tag,
        "before_id": filter.before_id,
    }
    clauses = tuple(clause for key, clause in _JOB_CLAUSES if values[key] is not None)
    return clauses, {key: value for key, value in values.items() if value is not None}


class FactWriter:
    """Reads of resolved snapshots and the writes that replace them."""

    def __init__(self, statements: Statements, lanes: LaneAllocator) -> None:
        self._sql = statements
        self._lanes = lanes
        self._schema = statements.schema

    async def resolve(self, conn: DictConnection, ids: Iterable[int]) -> dict[int, Resolved]:
        """The current snapshots of ``ids`` (missing ids are absent), by id."""
        rows = await self._sql.exec(conn, "snapshots", ids=list(ids))
        return {row["id"]: Resolved.from_row(row) for row in rows}

    async def flush(self, conn: DictConnection, writes: Writes, *, producer: bool = False) -> None:
        """Counters last (sorted, as the lock order says), then wake-ups. A ``producer``
        (an enqueue) adds its counters to buckets no other open transaction holds."""
        deltas = sorted((key, d) for key, d in writes.counts.items() if d != 0)
        if deltas:
            await self._sql.exec(
                conn,
                "add_counts_free" if producer else "add_counts",
                queues=[k[0] for k, _ in deltas],
                states=[k[1] for k, _ in deltas],
                deltas=[d for _, d in deltas],
            )
        done = sorted((key, d) for key, d in writes.completions.items() if d != 0)
        if done:
            await self._sql.exec(
                conn,
                "add_completions",
                queues=[k[0] for k, _ in done],
                minutes=[k[1] for k, _ in done],
                deltas=[d for _, d in done],
            )
        if writes.notify:
            pending = sorted(writes.notify)
            await self._sql.exec(
                conn,
                "notify",
                channels=[channel for channel, _ in pending],
                payloads=[payload for _, payload in pending],
            )

    async def unique(
        self, conn: DictConnection, changes: Sequence[tuple[JobRecord | None, JobRecord | None]]
    ) -> None:
        """Release keys of jobs leaving their mask, then claim keys of jobs entering it."""
        release = [
            (old.unique_key, old.id)
            for old, new in changes
            if old is not None
            and old.unique_key is not None
            and holds_unique_key(old)
            and not holds_unique_key(new)
        ]
        claim = [
            (new.unique_key, new.id)
            for old, new in changes
            if new is not None
            and new.unique_key is not None
            and holds_unique_key(new)
            and not holds_unique_key(old)
        ]
        await self.release_keys(conn, release)
        if claim:
            got = await self._sql.exec(
                conn, "unique_claim", keys=[k for k, _ in claim], ids=[i for _, i in claim]
            )
            if len(got) != len(claim):
                # The first key claimed twice (in the table or inside this batch).
                left = Counter(bytes(row["unique_key"]) for row in got)
                missing = b""
                for key, _ in claim:
                    if left[bytes(key)] == 0:
                        missing = bytes(key)
                        break
                    left[bytes(key)] -= 1
                # Give back the keys this call did claim, so a caller's transaction is
                # left as it was (enqueue inside a unit of work needs no savepoint).
                await self._sql.exec(
                    conn,
                    "unique_release",
                    keys=[row["unique_key"] for row in got],
                    ids=[row["job_id"] for row in got],
                )
                holder = await self._sql.exec(conn, "unique_holder", key=missing)
                raise UniqueConflict(
                    "a live job already holds this unique key",
                    job_id=holder[0]["job_id"] if holder else None,
                )

    async def release_keys(self, conn: DictConnection, held: Sequence[tuple[bytes, int]]) -> None:
        """Give back the unique keys ``(key, job id)`` these jobs hold."""
        if held:
            await self._sql.exec(
                conn, "unique_release", keys=[k for k, _ in held], ids=[i for _, i in held]
            )

    async def place(
        self,
        conn: DictConnection,
        items: Sequence[tuple[JobRecord, bytes | None]],
        *,
        stamp: datetime | None = None,
    ) -> dict[int, datetime]:
        """Append each snapshot to the plane its state lives in. ``stamp``: the snapshots
        are new jobs, and the available ones stamped ``stamp`` may get a later run_at under
        their lane's lock (:meth:`LaneAllocator.reserve`). Returns the run_at of each job
        whose run_at was moved, by job id."""
        ready = [(job, key) for job, key in items if job.state == JobState.Available]
        deferred = [row_json(job, key) for job, key in items if job.state in DEFERRED]
        done = [row_json(job, key) for job, key in items if job.state in TERMINAL_STATES]
        moved: dict[int, datetime] = {}
        if ready:
            seqs = await self._lanes.reserve(conn, ready, stamp=stamp)
            rows = []
            for (job, key), (shard, seq, run_at) in zip(ready, seqs, strict=True):
                if run_at != job.run_at:
                    moved[job.id] = run_at
                    job = attrs.evolve(job, run_at=run_at)
                rows.append(row_json(job, key, shard=shard, lane_seq=seq))
            await self._sql.exec(conn, "insert_ready", rows=json.dumps(rows))
        if deferred:
            await self._sql.exec(conn, "insert_deferred", rows=json.dumps(deferred))
        if done:
            await self._sql.exec(conn, "insert_done", rows=json.dumps(done))
        return moved

    async def mark_retiring(self, conn: DictConnection, heads: Sequence[Resolved]) -> None:
        """Lock and mark the lanes of these unclaimed ready rows for retirement
        (``awa.queue_storage_retire_lanes``: claim heads in key order, each marked once
        per transaction). :meth:`retire_ready` does this itself; a writer that retires
        rows of many lanes one by one (a drain) calls it first with all of them, so it
        takes the lane locks in the one order every writer uses."""
        facts = [(r.ready_slot, r.ready_fact) for r in heads if r.job.state == JobState.Available]
        if not facts:
            return
        lanes = await self._sql.exec(
            conn,
            "ready_lane_of",
            slots=[slot for slot, _ in facts],
            facts=[fact for _, fact in facts],
        )
        order = sorted({(r["queue"], r["priority"], r["shard"]) for r in lanes})
        await self._sql.exec(
            conn,
            "retire_lanes",
            schema=self._schema,
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
        )

    async def retire_ready(self, conn: DictConnection, heads: Sequence[Resolved]) -> set[int]:
        """Tombstone the unclaimed ready rows that are these jobs' heads; returns the ids
        of the jobs retired. The one way to retire an unclaimed row (cancel, drain,
        delete, operator moves, batch operations): inside the caller's transaction, lock
        and mark the rows' lanes (:meth:`mark_retiring`), re-read the jobs under those
        locks (no claimer is inside the lanes now, and this read sees every claim that
        committed before) and tombstone only rows that are still the unclaimed head.
        A claim whose snapshot predates this transaction's commit sees the mark and
        leaves the lane alone (ADR 0006, "Retiring unclaimed rows"). The caller then
        appends each retired job's next snapshot and counts the move; a job left out was
        claimed or changed meanwhile (re-read it or report it stale)."""
        ready = [r for r in heads if r.job.state == JobState.Available]
        if not ready:
            return set()
        await self.mark_retiring(conn, ready)
        again = await self.resolve(conn, [r.job.id for r in ready])
        free = []
        for r in ready:
            current = again.get(r.job.id)
            if (
                current is not None
                and current.job.state == JobState.Available
                and (current.ready_slot, current.ready_fact) == (r.ready_slot, r.ready_fact)
            ):
                free.append(r)
        if not free:
            return set()
        got = await self._sql.exec(
            conn,
            "tombstone",
            slots=[r.ready_slot for r in free],
            facts=[r.ready_fact for r in free],
        )
        retired = {row["ready_fact"] for row in got}
        return {r.job.id for r in free if r.ready_fact in retired}

    async def supersede(self, conn: DictConnection, old: Resolved, now: datetime) -> bool:
        """Retire the head fact of ``old`` so a new snapshot can take over.

        Returns False when the fact changed underneath (a claim won the row, a finaliser
        closed the attempt, promotion took the deferred row): the caller reports stale or
        re-reads.
        """
        state = old.job.state
        if state == JobState.Available:
            return old.job.id in await self.retire_ready(conn, [old])
        if state in DEFERRED:
            got = await self._sql.exec(conn, "take_deferred", ids=[old.job.id])
            return bool(got)
        if state in LIVE_STATES:
            assert old.ready_slot is not None and old.claim_id is not None
            got = await self._sql.exec(
                conn,
                "close_claims",
                now=now,
                slots=[old.ready_slot],
                claims=[old.claim_id],
                queues=[old.job.queue],
                outcomes=["moved"],
            )
            # The attempt's lease row (if any) no longer resolves once the claim is
            # closed; it goes with its lease slot's TRUNCATE.
            return bool(got)
        # A terminal head needs no write (the next fact has a higher fact id), but prune
        # may be reclaiming its slot: take the prune gate shared, then make sure the job
        # still reads as it did. A prune that committed in between dropped it or carried it
        # forward; the caller then re-reads.
        await self._sql.exec(conn, "prune_gate_shared", gate=PRUNE_GATE, schema=self._schema)
        latest = (await self.resolve(conn, [old.job.id])).get(old.job.id)
        return latest is not None and latest.job == old.job and latest.ready_slot == old.ready_slot

    async def transition(
        self,
        conn: DictConnection,
        writes: Writes,
        old: Resolved,
        new: JobRecord | None,
        *,
        dlq_reason: str | None = None,
    ) -> bool:
        """Replace ``old``'s snapshot by ``new`` (``None`` deletes the job; with
        ``dlq_reason`` the new failed snapshot goes to the DLQ instead)."""
        if (
            old.job.state == JobState.Available
            and new is not None
            and new.state == JobState.Available
            and dlq_reason is None
        ):
            await self._lanes.lock_named(conn, [(new, old.ordering_key)])
        if not await self.supersede(conn, old, writes.now):
            return False
        if new is None or dlq_reason is not None:
            if old.job.state in TERMINAL_STATES or (
                old.job.state in LIVE_STATES and dlq_reason is not None
            ):
                await self._sql.exec(
                    conn, "insert_deletion_markers", ids=[old.job.id], history_only=False
                )
            elif old.job.state in DEFERRED:
                await self._sql.exec(
                    conn, "insert_deletion_markers", ids=[old.job.id], history_only=True
                )
            if dlq_reason is not None and new is not None:
                entry = row_json(
                    new, old.ordering_key, dlq_reason=dlq_reason, dlq_at=iso(writes.now)
                )
                await self._sql.exec(conn, "insert_dlq", rows=json.dumps([entry]))
            await self.unique(conn, [(old.job, None)])
            writes.move(old.job, None)
            return True
        await self.unique(conn, [(old.job, new)])
        await self.place(conn, [(new, old.ordering_key)])
        writes.move(old.job, new)
        return True

    async def matching(self, conn: DictConnection, filter: JobFilter) -> list[Resolved]:
        """Every job ``filter`` matches, in id order (the order admin writes change them
        in)."""
        clauses, params = job_filter(filter)
        rows = await self._sql.exec_filtered(conn, "matching_jobs", clauses, params)
        return [Resolved.from_row(row) for row in rows]
