"""Shared machinery of the queue-storage engine: connections, SQL, and writing snapshots.

A job is a chain of immutable facts (ADR 0006). Operations read the job's resolved
snapshot, decide the next snapshot exactly as the reference model would, and then
*append* the facts that express it: a tombstone or closure that supersedes the old fact,
and a ready / deferred / done row (or a DLQ row) holding the new snapshot.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.pool import DictConnection, connect
from awa.adapters._pg.rows import job_from_row
from awa.adapters.postgres_queue_storage.statements import SPARE_LANES, Statements, run
from awa.domain.channels import queue_channel
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.job import JobRecord, JobSpec
from awa.domain.policies import Backoff
from awa.domain.routing import shard_for_key
from awa.domain.states import (
    DEFAULT_UNIQUE_STATES,
    TERMINAL_STATES,
    JobState,
    mask_contains,
    mask_to_bitstring,
)
from awa.ports.clock import Clock

LIVE_STATES = frozenset({JobState.Running, JobState.WaitingExternal})
DEFERRED = frozenset({JobState.Scheduled, JobState.Retryable})
CANCEL_CHANNEL = "awa:cancel"
#: First key of the prune gate, a transaction-level advisory lock (two-int form; the second
#: key is the schema's hash). Prune holds it exclusively while it decides what happens to
#: the jobs of the slot it reclaims; a change to a terminal job takes it shared.
PRUNE_GATE = 0x61776170
# Connections an engine keeps, outside its pool, for each hot statement (the common claim,
# completion by receipt). Calls run one after another on the most recently used one,
# whose backend has the statement planned and its caches warm; a pooled connection comes
# round-robin and costs about 0.3 ms more per call. More calls at once than this take
# pooled connections.
KEPT_CONNECTIONS = 2

log = logging.getLogger("awa.adapters.postgres_queue_storage")


def holds_unique_key(job: JobRecord | None) -> bool:
    """A job owns its unique key exactly while its state is inside its mask."""
    if job is None or job.unique_key is None:
        return False
    mask = DEFAULT_UNIQUE_STATES if job.unique_states is None else job.unique_states
    return mask_contains(mask, job.state)


def minute_of(value: datetime) -> datetime:
    """The UTC minute a completion is counted in (``completions`` buckets)."""
    return value.astimezone(UTC).replace(second=0, microsecond=0)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _hex(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).hex()


def row_json(job: JobRecord, ordering_key: bytes | None = None, **extra: Any) -> dict[str, Any]:
    """A snapshot as one object of the ``jsonb_to_recordset`` input the inserts read."""
    data: dict[str, Any] = {
        "job_id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "args": job.args,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": _iso(job.run_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "deadline_at": _iso(job.deadline_at),
        "attempted_at": _iso(job.attempted_at),
        "finalized_at": _iso(job.finalized_at),
        "created_at": _iso(job.created_at),
        "errors": list(job.errors),
        "metadata": job.metadata,
        "tags": list(job.tags),
        "unique_key": _hex(job.unique_key),
        "unique_states": None
        if job.unique_states is None
        else mask_to_bitstring(job.unique_states),
        "callback_id": job.callback_id,
        "callback_timeout_at": _iso(job.callback_timeout_at),
        "run_lease": job.run_lease,
        "progress": job.progress,
        "ordering_key": _hex(ordering_key),
        "state": job.state.sql_name,
    }
    data.update(extra)
    return data


@attrs.frozen
class Resolved:
    """A job's current snapshot plus where its head fact lives."""

    job: JobRecord
    ordering_key: bytes | None
    ready_slot: int | None
    ready_fact: int | None
    claim_id: int | None
    open_claim: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Resolved:
        key = row.get("ordering_key")
        return cls(
            job=job_from_row(row),
            ordering_key=None if key is None else bytes(key),
            ready_slot=row["ready_slot"],
            ready_fact=row["ready_fact"],
            claim_id=row["claim_id"],
            open_claim=bool(row["open_claim"]),
        )


class PgUnitOfWork:
    """A caller transaction on one pooled connection."""

    def __init__(self, owner: object, conn: DictConnection) -> None:
        self.owner = owner
        self.conn = conn
        self.open = True
        self.channels: set[str] = set()


class Writes:
    """What one transaction accumulates: counter deltas, unique changes, notifications."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counts: Counter[tuple[str, str]] = Counter()
        self.completions: Counter[tuple[str, datetime]] = Counter()
        self.notify: set[tuple[str, str]] = set()

    def completed(self, queue: str, finalized_at: datetime | None, delta: int) -> None:
        """Count a job entering (+1) or leaving (-1) ``completed`` in its minute bucket."""
        if finalized_at is not None:
            self.completions[(queue, minute_of(finalized_at))] += delta

    def move(self, old: JobRecord | None, new: JobRecord | None) -> None:
        if old is not None:
            self.counts[(old.queue, old.state.sql_name)] -= 1
            if old.state == JobState.Completed:
                self.completed(old.queue, old.finalized_at, -1)
        if new is not None:
            self.counts[(new.queue, new.state.sql_name)] += 1
            if new.state == JobState.Completed:
                self.completed(new.queue, new.finalized_at, 1)
            if new.state == JobState.Available:
                self.notify.add((queue_channel(new.queue), ""))


@attrs.define
class _Kept:
    """The connections kept for one purpose: idle ones (most recent last), and how many
    are open (idle or in use)."""

    idle: list[DictConnection] = attrs.field(factory=list)
    open: int = 0


async def settled(task: asyncio.Task[None] | None) -> None:
    """Wait for ``task`` to end, if there is one still running (engine shutdown)."""
    if task is not None and not task.done():
        await asyncio.wait([task])


class QueueStorageBase:
    """Connections, statements and the snapshot-writing helpers every operation uses."""

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        *,
        clock: Clock,
        backoff: Backoff,
        schema: str,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._backoff = backoff
        self._schema = schema
        self._sql = Statements(schema)
        self._rotor: dict[str, int] = {}
        self._shards: dict[str, int] = {}
        # Receipts this engine took itself, for attempts without a unique key:
        # (job_id, run_lease) -> (slot, claim_id, queue). A completion of one of them is
        # closed by its receipt key without looking the job up (see complete_receipts_counted).
        # An entry left behind by an attempt finalised elsewhere is harmless: the closure
        # key and the receipt check decide, the entry only saves a lookup.
        self._receipts: dict[tuple[int, int], tuple[int, int, str]] = {}
        # Queues whose last claim met a lane window that must be sorted (claim_sorted).
        self._sorting: set[str] = set()
        self._stage_seq = 0
        self._closed = False
        self._wake_pending: set[str] = set()
        self._in_flight = 0
        self._wake_task: asyncio.Task[None] | None = None
        # Single inserts that arrived while another enqueue was in flight, waiting to be
        # written together (core.py, _join_batch).
        self._batch: list[tuple[JobSpec, asyncio.Future[JobRecord]]] = []
        self._batch_task: asyncio.Task[None] | None = None
        # Connections kept for the hot statements, by purpose (claim, completion).
        self._kept: dict[str, _Kept] = {}

    # ---------------------------------------------------------------- connections
    @asynccontextmanager
    async def _kept_conn(self, purpose: str) -> AsyncIterator[DictConnection]:
        """An autocommit connection kept for one hot statement (``purpose``): its most
        recently used one, a new one (up to ``KEPT_CONNECTIONS`` per purpose), or else a
        pooled one. A kept connection whose statement failed or was cancelled is closed,
        not reused."""
        if self._closed:
            raise DatabaseError("the queue-storage engine is closed")
        kept = self._kept.get(purpose)
        if kept is None:
            kept = self._kept[purpose] = _Kept()
        if not kept.idle and kept.open >= KEPT_CONNECTIONS:
            async with self._pool.connection() as pooled:
                yield pooled
            return
        if kept.idle:
            conn = kept.idle.pop()
        else:
            kept.open += 1
            try:
                conninfo = self._pool.conninfo
                if not isinstance(conninfo, str):
                    raise TypeError("the engine's pool must be opened on a connection string")
                conn = await connect(conninfo)
            except BaseException:
                kept.open -= 1
                raise
        try:
            yield conn
        except BaseException:
            await self._drop_kept(kept, conn)
            raise
        if self._closed or conn.closed:
            await self._drop_kept(kept, conn)
        else:
            kept.idle.append(conn)

    async def _drop_kept(self, kept: _Kept, conn: DictConnection) -> None:
        kept.open -= 1
        with anyio.CancelScope(shield=True):
            try:
                await conn.close()
            except Exception:
                log.debug("closing a kept connection failed", exc_info=True)

    async def _close_kept(self) -> None:
        """Close the kept connections (engine shutdown)."""
        for kept in self._kept.values():
            idle, kept.idle = kept.idle, []
            for conn in idle:
                await self._drop_kept(kept, conn)

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[DictConnection]:
        """A pooled autocommit connection, for one statement that is its own transaction."""
        if self._closed:
            raise DatabaseError("the queue-storage engine is closed")
        async with self._pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def _tx(self, *, pipeline: bool = False) -> AsyncIterator[DictConnection]:
        """One transaction on a pooled connection. With ``pipeline`` the statements are
        sent in pipeline mode: ``BEGIN`` travels with the first statement, and everything
        after the last read (cursor moves, counters, notifications) with ``COMMIT``."""
        async with self._conn() as conn:
            if pipeline:
                async with conn.pipeline(), conn.transaction():
                    yield conn
            else:
                async with conn.transaction():
                    yield conn

    async def _exec(self, conn: DictConnection, name: str, **params: Any) -> list[dict[str, Any]]:
        return await self._sql.exec(conn, name, **params)

    async def _exec_generic(
        self, conn: DictConnection, name: str, **params: Any
    ) -> list[dict[str, Any]]:
        return await self._sql.exec_generic(conn, name, **params)

    # ---------------------------------------------------------------- wake-ups
    def _wake_after_commit(self, channels: Iterable[str]) -> None:
        """Notify ``channels`` after an enqueue committed, outside its transaction.

        A transaction that notifies holds one database-wide lock through its commit, so
        producers that notify in their own transaction commit one at a time (no group
        commit). Wake-ups are sent instead by one task per engine, coalesced while one is
        in flight, in a transaction of their own without a durable commit. Best effort,
        like every wake-up: workers also poll."""
        self._wake_pending.update(channels)
        if self._wake_task is None or self._wake_task.done():
            self._wake_task = asyncio.get_running_loop().create_task(self._send_wakes())

    async def _send_wakes(self) -> None:
        while self._wake_pending and not self._closed:
            channels = sorted(self._wake_pending)
            self._wake_pending.clear()
            try:
                async with self._pool.connection() as conn:
                    await run(conn, self._sql["wake_quietly"], {"channels": channels}, prepare=True)
            except Exception:
                log.debug("wake-up notification failed", exc_info=True)

    async def _drain_wakes(self) -> None:
        """Let a wake-up in flight finish (engine shutdown)."""
        task, self._wake_task = self._wake_task, None
        await settled(task)

    # ---------------------------------------------------------------- reads
    async def _resolve(self, conn: DictConnection, ids: Iterable[int]) -> dict[int, Resolved]:
        rows = await self._exec(conn, "snapshots", ids=list(ids))
        return {row["id"]: Resolved.from_row(row) for row in rows}

    # ---------------------------------------------------------------- writes
    async def _flush(self, conn: DictConnection, writes: Writes, *, producer: bool = False) -> None:
        """Counters last (sorted, as the lock order says), then wake-ups. A ``producer``
        (an enqueue) adds its counters to buckets no other open transaction holds."""
        deltas = sorted((key, d) for key, d in writes.counts.items() if d != 0)
        if deltas:
            await self._exec(
                conn,
                "add_counts_free" if producer else "add_counts",
                queues=[k[0] for k, _ in deltas],
                states=[k[1] for k, _ in deltas],
                deltas=[d for _, d in deltas],
            )
        done = sorted((key, d) for key, d in writes.completions.items() if d != 0)
        if done:
            await self._exec(
                conn,
                "add_completions",
                queues=[k[0] for k, _ in done],
                minutes=[k[1] for k, _ in done],
                deltas=[d for _, d in done],
            )
        if writes.notify:
            pending = sorted(writes.notify)
            await self._exec(
                conn,
                "notify",
                channels=[channel for channel, _ in pending],
                payloads=[payload for _, payload in pending],
            )

    async def _unique(
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
        await self._release_keys(conn, release)
        if claim:
            got = await self._exec(
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
                await self._exec(
                    conn,
                    "unique_release",
                    keys=[row["unique_key"] for row in got],
                    ids=[row["job_id"] for row in got],
                )
                holder = await self._exec(conn, "unique_holder", key=missing)
                raise UniqueConflict(
                    "a live job already holds this unique key",
                    job_id=holder[0]["job_id"] if holder else None,
                )

    async def _release_keys(self, conn: DictConnection, held: Sequence[tuple[bytes, int]]) -> None:
        """Give back the unique keys ``(key, job id)`` these jobs hold."""
        if held:
            await self._exec(
                conn, "unique_release", keys=[k for k, _ in held], ids=[i for _, i in held]
            )

    def _shard_count(self, queue: str) -> int:
        return self._shards.get(queue, 1)

    async def _load_shards(self, conn: DictConnection, queues: Iterable[str]) -> None:
        """Read the queues' ``enqueue_shards`` (an ordering key's lane depends on it)."""
        wanted = sorted(set(queues))
        rows = await self._exec(conn, "enqueue_shards", queues=wanted)
        found = {row["queue"]: int(row["enqueue_shards"]) for row in rows}
        for queue in wanted:
            self._shards[queue] = found.get(queue, 1)

    def _hint(self, queue: str) -> int:
        """The lane a job without an ordering key tries first: the process's rotor over
        as many of the queue's negative lanes as it has enqueue shards (another free lane
        is taken when that one is held)."""
        shards = min(self._shard_count(queue), SPARE_LANES)
        turn = self._rotor.get(queue, 0)
        self._rotor[queue] = turn + 1
        return -1 - turn % shards

    async def _reserve(
        self,
        conn: DictConnection,
        ready: Sequence[tuple[JobRecord, bytes | None]],
    ) -> list[tuple[int, int]]:
        """Reserve each available job's lane position (lock order: ``lanes`` rows, then
        ``claim_heads`` rows). A job with an ordering key goes to its key's shard; the jobs
        of one ``(queue, priority)`` without a key go together to whichever lane of it no
        other open transaction holds. Returns ``(shard, lane_seq)`` per job, in input
        order."""
        keyed = {job.queue for job, key in ready if key is not None}
        if keyed:
            await self._load_shards(conn, keyed)
        # None stands for "any free lane of (queue, priority)".
        lanes: list[tuple[str, int, int | None]] = [
            (
                job.queue,
                job.priority,
                None if key is None else shard_for_key(key, self._shard_count(job.queue)),
            )
            for job, key in ready
        ]
        wanted = Counter(lanes)
        order = sorted(wanted, key=lambda lane: (lane[0], lane[1], lane[2] is None, lane[2]))
        # Each lane's order key (run_at, job id): first and largest of the batch, and
        # whether the batch itself is in that order, so the lane row can record it.
        keys: dict[tuple[str, int, int | None], list[tuple[datetime, int]]] = {}
        for (job, _), lane in zip(ready, lanes, strict=True):
            keys.setdefault(lane, []).append((job.run_at, job.id))
        ends = await self._exec(
            conn,
            "reserve_lanes",
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
            hints=[self._hint(lane[0]) for lane in order],
            counts=[wanted[lane] for lane in order],
            first_runs=[keys[lane][0][0] for lane in order],
            first_ids=[keys[lane][0][1] for lane in order],
            last_runs=[max(keys[lane])[0] for lane in order],
            last_ids=[max(keys[lane])[1] for lane in order],
            sorted=[keys[lane] == sorted(keys[lane]) for lane in order],
        )
        nxt: dict[tuple[str, int, int | None], list[int]] = {}
        for r in ends:
            lane = (r["queue"], r["priority"], r["asked"])
            nxt[lane] = [r["shard"], r["next_seq"] - wanted[lane]]
        placed = []
        for lane in lanes:
            shard_seq = nxt[lane]
            placed.append((shard_seq[0], shard_seq[1]))
            shard_seq[1] += 1
        return placed

    async def _place(
        self, conn: DictConnection, items: Sequence[tuple[JobRecord, bytes | None]]
    ) -> None:
        """Append each snapshot to the plane its state lives in."""
        ready = [(job, key) for job, key in items if job.state == JobState.Available]
        deferred = [row_json(job, key) for job, key in items if job.state in DEFERRED]
        done = [row_json(job, key) for job, key in items if job.state in TERMINAL_STATES]
        if ready:
            seqs = await self._reserve(conn, ready)
            rows = [
                row_json(job, key, shard=shard, lane_seq=seq)
                for (job, key), (shard, seq) in zip(ready, seqs, strict=True)
            ]
            await self._exec(conn, "insert_ready", rows=json.dumps(rows))
        if deferred:
            await self._exec(conn, "insert_deferred", rows=json.dumps(deferred))
        if done:
            await self._exec(conn, "insert_done", rows=json.dumps(done))

    async def _mark_retiring(self, conn: DictConnection, heads: Sequence[Resolved]) -> None:
        """Lock and mark the lanes of these unclaimed ready rows for retirement
        (``awa.queue_storage_retire_lanes``: claim heads in key order, each marked once
        per transaction). :meth:`_retire_ready` does this itself; a writer that retires
        rows of many lanes one by one (a drain) calls it first with all of them, so it
        takes the lane locks in the one order every writer uses."""
        facts = [(r.ready_slot, r.ready_fact) for r in heads if r.job.state == JobState.Available]
        if not facts:
            return
        lanes = await self._exec(
            conn,
            "ready_lane_of",
            slots=[slot for slot, _ in facts],
            facts=[fact for _, fact in facts],
        )
        order = sorted({(r["queue"], r["priority"], r["shard"]) for r in lanes})
        await self._exec(
            conn,
            "retire_lanes",
            schema=self._schema,
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
        )

    async def _retire_ready(self, conn: DictConnection, heads: Sequence[Resolved]) -> set[int]:
        """Tombstone the unclaimed ready rows that are these jobs' heads; returns the ids
        of the jobs retired. The one way to retire an unclaimed row (cancel, drain,
        delete, operator moves, batch operations): inside the caller's transaction, lock
        and mark the rows' lanes (:meth:`_mark_retiring`), re-read the jobs under those
        locks (no claimer is inside the lanes now, and this read sees every claim that
        committed before) and tombstone only rows that are still the unclaimed head.
        A claim whose snapshot predates this transaction's commit sees the mark and
        leaves the lane alone (ADR 0006, "Retiring unclaimed rows"). The caller then
        appends each retired job's next snapshot and counts the move; a job left out was
        claimed or changed meanwhile (re-read it or report it stale)."""
        ready = [r for r in heads if r.job.state == JobState.Available]
        if not ready:
            return set()
        await self._mark_retiring(conn, ready)
        again = await self._resolve(conn, [r.job.id for r in ready])
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
        got = await self._exec(
            conn,
            "tombstone",
            slots=[r.ready_slot for r in free],
            facts=[r.ready_fact for r in free],
        )
        retired = {row["ready_fact"] for row in got}
        return {r.job.id for r in free if r.ready_fact in retired}

    async def _supersede(self, conn: DictConnection, old: Resolved, now: datetime) -> bool:
        """Retire the head fact of ``old`` so a new snapshot can take over.

        Returns False when the fact changed underneath (a claim won the row, a finaliser
        closed the attempt, promotion took the deferred row): the caller reports stale or
        re-reads.
        """
        state = old.job.state
        if state == JobState.Available:
            return old.job.id in await self._retire_ready(conn, [old])
        if state in DEFERRED:
            got = await self._exec(conn, "take_deferred", ids=[old.job.id])
            return bool(got)
        if state in LIVE_STATES:
            assert old.ready_slot is not None and old.claim_id is not None
            got = await self._exec(
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
        await self._exec(conn, "prune_gate_shared", gate=PRUNE_GATE, schema=self._schema)
        latest = (await self._resolve(conn, [old.job.id])).get(old.job.id)
        return latest is not None and latest.job == old.job and latest.ready_slot == old.ready_slot

    async def _transition(
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
        if not await self._supersede(conn, old, writes.now):
            return False
        if new is None or dlq_reason is not None:
            if old.job.state in TERMINAL_STATES or (
                old.job.state in LIVE_STATES and dlq_reason is not None
            ):
                await self._exec(conn, "insert_deletion_markers", ids=[old.job.id])
            if dlq_reason is not None and new is not None:
                entry = row_json(
                    new, old.ordering_key, dlq_reason=dlq_reason, dlq_at=_iso(writes.now)
                )
                await self._exec(conn, "insert_dlq", rows=json.dumps([entry]))
            await self._unique(conn, [(old.job, None)])
            writes.move(old.job, None)
            return True
        await self._unique(conn, [(old.job, new)])
        await self._place(conn, [(new, old.ordering_key)])
        writes.move(old.job, new)
        return True
