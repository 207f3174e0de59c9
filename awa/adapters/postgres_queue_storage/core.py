"""Hot path and attempt outcomes of the queue-storage engine.

Enqueue appends ready rows, a claim appends receipts, a successful short attempt appends a
compact closure. Everything else (retry, snooze, fail, cancel, rescue, callbacks) closes
the receipt and appends the job's next snapshot where its new state lives.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import attrs
import psycopg
from psycopg import AsyncCursor, sql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage._base import (
    LIVE_STATES,
    PgUnitOfWork,
    QueueStorageBase,
    Resolved,
    Writes,
    minute_of,
)
from awa.adapters.postgres_queue_storage.statements import run
from awa.domain.callbacks import (
    CALLBACK_FAILED_REASON,
    CLEARED,
    CallbackExpressions,
    callback_not_found,
    check_action,
    failure_entry,
    resume_changes,
    retry_changes,
)
from awa.domain.channels import queue_channel
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.job import Claim, JobRecord, JobSpec, RunLease, error_entry
from awa.domain.routing import shard_for_key
from awa.domain.states import JobState, bitstring_to_mask, mask_to_bitstring
from awa.domain.validation import validate_spec
from awa.ports.storage import Ack, Rescued, UnitOfWork

RUNNING_ONLY = frozenset({JobState.Running})

Decide = Callable[[Resolved, Writes], JobRecord]

#: Column types of the binary COPY staging table, in column order.
_STAGE_TYPES = (
    "int8",
    "text",
    "text",
    "jsonb",
    "int2",
    "int2",
    "timestamptz",
    "timestamptz",
    "jsonb",
    "text[]",
    "bytea",
    "text",
    "bytea",
    "int4",
    "int8",
    "text",
)


def _claimed_job(row: dict[str, Any]) -> JobRecord:
    """The running snapshot a claim statement returns, built directly: the column types
    are fixed by the statement, so the generic row converter's checks are not needed."""
    key = row["unique_key"]
    states = row["unique_states"]
    return JobRecord(
        id=row["id"],
        kind=row["kind"],
        queue=row["queue"],
        args=row["args"],
        state=JobState.Running,
        priority=row["priority"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        created_at=row["created_at"],
        heartbeat_at=row["heartbeat_at"],
        deadline_at=row["deadline_at"],
        attempted_at=row["attempted_at"],
        finalized_at=row["finalized_at"],
        errors=tuple(row["errors"] or ()),
        metadata=row["metadata"] if row["metadata"] is not None else {},
        tags=tuple(row["tags"] or ()),
        unique_key=None if key is None else bytes(key),
        unique_states=None if states is None else bitstring_to_mask(states),
        callback_id=row["callback_id"],
        callback_timeout_at=row["callback_timeout_at"],
        run_lease=row["run_lease"],
        progress=row["progress"],
    )


# Receipts remembered for completion by key; beyond this the oldest half is forgotten.
_RECEIPT_CACHE_LIMIT = 200_000


class RouteChanged(Exception):
    """Producers no longer write new jobs to this engine's schema (the storage transition
    moved on): nothing was inserted; read the route again. ``supported`` is False when the
    database has no route check (a schema before migration 0320)."""

    def __init__(self, message: str, *, supported: bool = True) -> None:
        super().__init__(message)
        self.supported = supported


# COPY text format: a backslash starts an escape, \N is NULL and bytea is written \\x<hex>.
BACKSLASH = "\\"
ESCAPED = "\\\\"
NULL = "\\N"
HEX = "\\\\x"
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str) -> str:
    """A text value as one field of a COPY text row."""
    return value.translate(_COPY_ESCAPES)


def _text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal: every element quoted, ``"`` and backslash escaped."""
    quoted = ('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values)
    return "{" + ",".join(quoted) + "}"


#: Rows per piece of a direct COPY (about 100 KiB of text for small jobs).
_COPY_PIECE = 500


def _copy_shape(spec: JobSpec, slot: str, stamp: str) -> tuple[str, str, str, str]:
    """The fixed text of a direct-COPY row of ``spec``: before the fact id (slot), between
    the job id and args (kind, queue), between args and metadata (priority, attempt,
    max_attempts, run_at, created_at, errors) and between metadata and the ordering key
    (tags, unique states, run lease)."""
    return (
        f"{slot}\t",
        f"{_copy_text(spec.kind)}\t{_copy_text(spec.queue)}\t",
        f"{spec.priority}\t0\t{spec.max_attempts}\t{stamp}\t{stamp}\t{{}}\t",
        f"{_copy_text(_text_array(spec.tags))}\t"
        f"{mask_to_bitstring(spec.effective_unique_states)}\t0\t",
    )


def _job_fields(spec: JobSpec, unique_states: str, hint: int | None) -> dict[str, Any]:
    """The JSON fields of a job that enqueue_ready and enqueue_one_routed both read."""
    return {
        "kind": spec.kind,
        "queue": spec.queue,
        "args": spec.args,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "metadata": spec.metadata,
        "tags": list(spec.tags),
        "unique_states": unique_states,
        "hint": hint,
    }


#: How many claim statements one claim() runs when another transaction took one of its
#: rows first (_Contested) or a retiring writer's mark made it leave a lane alone; after
#: that it returns what it has.
_CONTESTED_TRIES = 3


class _Contested(Exception):
    """claim_sorted took a row another transaction claimed or tombstoned first; the
    transaction is rolled back."""


#: Most single inserts written by one statement of a batch (_join_batch).
_BATCH_LIMIT = 256


def _one_plain_job(spec: JobSpec) -> bool:
    """An available job without ordering or unique key: enqueue_one_routed can take it."""
    return spec.run_at is None and spec.ordering_key is None and spec.unique_key is None


def _ack(applied: bool) -> Ack:
    return Ack.APPLIED if applied else Ack.STALE


def _new_record(job_id: int, spec: JobSpec, now: datetime) -> JobRecord:
    return JobRecord(
        id=job_id,
        kind=spec.kind,
        queue=spec.queue,
        args=spec.args,
        state=JobState.Available if spec.run_at is None else JobState.Scheduled,
        priority=spec.priority,
        attempt=0,
        max_attempts=spec.max_attempts,
        run_at=now if spec.run_at is None else spec.run_at,
        created_at=now,
        metadata=dict(spec.metadata),
        tags=tuple(spec.tags),
        unique_key=spec.unique_key,
        unique_states=spec.effective_unique_states,
    )


class CoreOps(QueueStorageBase):
    """Producers, workers, callbacks and maintenance sweeps."""

    # ---------------------------------------------------------------- producers
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[UnitOfWork]:
        """A caller transaction: enqueues made through it commit (and notify) together."""
        if self._closed:
            raise DatabaseError("the queue-storage engine is closed")
        async with translated_errors(), self._pool.connection() as conn:
            uow = PgUnitOfWork(self, conn)
            try:
                async with conn.transaction():
                    yield uow
            finally:
                uow.open = False

    async def _insert(self, conn: DictConnection, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """The general enqueue: ids first, unique keys claimed, then the rows placed."""
        writes = Writes(self._clock.now())
        rows = await self._exec(conn, "next_job_ids", n=len(specs))
        records = [
            _new_record(row["id"], spec, writes.now) for row, spec in zip(rows, specs, strict=True)
        ]
        await self._unique(conn, [(None, job) for job in records])
        await self._place(
            conn, [(job, spec.ordering_key) for job, spec in zip(records, specs, strict=True)]
        )
        for job in records:
            writes.move(None, job)
        await self._flush(conn, writes, producer=True)
        return records

    async def _send_enqueue(
        self,
        conn: DictConnection,
        specs: Sequence[JobSpec],
        now: datetime,
        *,
        notify: bool,
        wake: set[str],
        restore: bool = False,
    ) -> AsyncCursor[DictRow]:
        """Queue an enqueue without unique keys: one prepared statement (ids, lanes, rows,
        counters) under its generic plan. Nothing is read, so in pipeline mode everything
        travels with the next sync; the returned cursor yields the ids in input order. The
        wake-ups of available jobs are added to ``wake``; with ``notify`` the statement
        also sends them (otherwise the caller does, after commit). ``restore`` gives a
        caller's unit of work its plan setting back."""
        params = self._enqueue_params(specs, now, notify=notify, wake=wake)
        await run(conn, self._sql["generic_plans"], prepare=True)
        cur = await run(conn, self._sql["enqueue_ready"], params, prepare=True)
        if restore:
            # A caller's unit of work goes on: give it its plan setting back.
            await run(conn, self._sql["restore_plans"], prepare=True)
        return cur

    def _enqueue_params(
        self, specs: Sequence[JobSpec], now: datetime, *, notify: bool, wake: set[str]
    ) -> dict[str, Any]:
        """The parameters of enqueue_ready; adds the wake-ups of available jobs to
        ``wake`` (and, with ``notify``, has the statement send them)."""
        rows = []
        masks: dict[int, str] = {}
        for ord_, spec in enumerate(specs, 1):
            mask = spec.effective_unique_states
            states = masks.get(mask)
            if states is None:
                states = masks[mask] = mask_to_bitstring(mask)
            available = spec.run_at is None
            row = _job_fields(spec, states, self._hint(spec.queue) if available else None)
            row["ord"] = ord_
            row["run_at"] = None if spec.run_at is None else spec.run_at.isoformat()
            row["ordering_key"] = None if spec.ordering_key is None else spec.ordering_key.hex()
            rows.append(row)
            if available:
                wake.add(queue_channel(spec.queue))
        return {
            "rows": json.dumps(rows),
            "now": now,
            "channels": sorted(wake) if notify else [],
            "schema": self._schema,
        }

    @staticmethod
    async def _records(
        cur: AsyncCursor[DictRow], specs: Sequence[JobSpec], now: datetime
    ) -> list[JobRecord]:
        rows = await cur.fetchall()
        return [_new_record(row["id"], spec, now) for row, spec in zip(rows, specs, strict=True)]

    async def enqueue_many_routed(
        self, specs: Sequence[JobSpec], *, validated: bool = False
    ) -> list[JobRecord]:
        """:meth:`enqueue_many` of jobs without unique keys, for a producer that remembers
        that new jobs go to this engine's schema: the insert is one statement on its own
        whose first step is ``awa.queue_storage_route_check`` (the producer lock, held to
        commit), which raises :class:`RouteChanged` (nothing committed) when producers
        write elsewhere now. ``validated``: the caller already ran ``validate_spec`` on
        every spec."""
        for spec in specs:
            if not validated:
                validate_spec(spec)
            if spec.unique_key is not None:
                raise ValueError("enqueue_many_routed takes jobs without unique keys only")
        if not specs:
            return []
        if len(specs) == 1 and self._in_flight and _one_plain_job(specs[0]):
            return [await self._join_batch(specs[0])]
        return await self._enqueue_routed(specs)

    async def _enqueue_routed(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        async with translated_errors():
            try:
                return await self._enqueue_fast(specs, route_check=True)
            except psycopg.errors.UndefinedFunction as exc:
                # A schema older than migration 0320.
                raise RouteChanged(str(exc), supported=False) from exc
            except psycopg.errors.ObjectNotInPrerequisiteState as exc:
                if exc.diag.message_hint != "awa_route_changed":
                    raise
                raise RouteChanged(str(exc)) from exc

    async def _join_batch(self, spec: JobSpec) -> JobRecord:
        """Group commit for concurrent producers: a single insert that arrives while
        another enqueue of this engine is in flight waits for the batch that goes next,
        and every insert that arrived meanwhile is written by one statement in one
        transaction (one WAL flush instead of one each). Each caller still returns only
        once its job is committed, and an error (a route change, a lost connection)
        reaches every caller of the batch, none of whose jobs was written."""
        if self._closed:
            raise DatabaseError("the queue-storage engine is closed")
        future: asyncio.Future[JobRecord] = asyncio.get_running_loop().create_future()
        self._batch.append((spec, future))
        if self._batch_task is None or self._batch_task.done():
            self._batch_task = asyncio.get_running_loop().create_task(self._send_batches())
        return await future

    async def _send_batches(self) -> None:
        while self._batch:
            taken, self._batch = self._batch[:_BATCH_LIMIT], self._batch[_BATCH_LIMIT:]
            # A caller cancelled before its batch went out gave up on its job: not written.
            taken = [(spec, future) for spec, future in taken if not future.done()]
            if not taken:
                continue
            try:
                records = await self._enqueue_routed([spec for spec, _ in taken])
            except Exception as exc:
                for _, future in taken:
                    if not future.done():
                        future.set_exception(exc)
                continue
            except BaseException:
                for _, future in taken:
                    future.cancel()
                raise
            for (_, future), record in zip(taken, records, strict=True):
                if not future.done():
                    future.set_result(record)

    async def _enqueue_fast(
        self, specs: Sequence[JobSpec], *, route_check: bool = False
    ) -> list[JobRecord]:
        """One round trip. With ``route_check``, one statement in autocommit: for a single
        plain job enqueue_one_routed, and enqueue_ready_routed for anything else (or when
        that wrote nothing: a second round trip); otherwise BEGIN, the statement and COMMIT
        are pipelined and the ids are read once the pipeline is synced."""
        if self._closed:
            raise DatabaseError("the queue-storage engine is closed")
        now = self._clock.now()
        wake: set[str] = set()
        # Alone, the enqueue notifies in its own transaction; next to other enqueues of
        # this engine it leaves the wake-up to _wake_after_commit (one commit-long lock).
        self._in_flight += 1
        try:
            async with self._pool.connection() as conn:
                alone = self._in_flight == 1 and not self._wake_pending
                records: list[JobRecord] = []
                if route_check and len(specs) == 1 and _one_plain_job(specs[0]):
                    records = await self._enqueue_one(conn, specs[0], now, alone, wake)
                if not records and route_check:
                    # One statement, its own transaction: one message and one round trip.
                    params = self._enqueue_params(specs, now, notify=alone, wake=wake)
                    cur = await run(conn, self._sql["enqueue_ready_routed"], params, prepare=True)
                    records = await self._records(cur, specs, now)
                elif not records:
                    async with conn.pipeline(), conn.transaction():
                        cur = await self._send_enqueue(conn, specs, now, notify=alone, wake=wake)
                    records = await self._records(cur, specs, now)
        finally:
            self._in_flight -= 1
        if wake and not alone:
            self._wake_after_commit(wake)
        return records

    async def _enqueue_one(
        self, conn: DictConnection, spec: JobSpec, now: datetime, notify: bool, wake: set[str]
    ) -> list[JobRecord]:
        """enqueue_one_routed: the job's record, or ``[]`` (nothing written) when its queue
        has no free counter bucket or lane yet and the full statement must run."""
        channel = queue_channel(spec.queue)
        job = _job_fields(
            spec, mask_to_bitstring(spec.effective_unique_states), self._hint(spec.queue)
        )
        cur = await run(
            conn,
            self._sql["enqueue_one_routed"],
            {
                "job": json.dumps(job),
                "now": now,
                "channels": [channel] if notify else [],
                "schema": self._schema,
            },
            prepare=True,
        )
        row = await cur.fetchone()
        if row is None:
            return []
        wake.add(channel)
        return [_new_record(row["id"], spec, now)]

    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> list[JobRecord]:
        """Enqueue ``specs`` (in ``uow`` when given). ``validated``: the caller already ran
        ``validate_spec`` on every spec."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        if not specs:
            return []
        fast = all(spec.unique_key is None for spec in specs)
        async with translated_errors():
            if uow is None:
                if fast:
                    return await self._enqueue_fast(specs)
                async with self._tx(pipeline=True) as conn:
                    return await self._insert(conn, specs)
            if not isinstance(uow, PgUnitOfWork) or uow.owner is not self:
                raise DatabaseError("the unit of work does not belong to this engine")
            if not uow.open:
                raise DatabaseError("the unit of work is already closed")
            if fast:
                now = self._clock.now()
                async with uow.conn.pipeline():
                    cur = await self._send_enqueue(
                        uow.conn, specs, now, notify=True, wake=set(), restore=True
                    )
                return await self._records(cur, specs, now)
            # No savepoint: validation ran above, and a unique conflict gives back the keys
            # it claimed before raising, so the caller's transaction stays usable.
            return await self._insert(uow.conn, specs)

    async def enqueue_many_copy(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None, validated: bool = False
    ) -> int:
        """Bulk enqueue through binary ``COPY``: the rows stream into a temporary staging
        table and one ``INSERT ... SELECT`` appends them to the ready rows (or the
        deferred backlog for specs with ``run_at``). Lane positions are reserved exactly as
        :meth:`enqueue_many` does, unique keys are claimed (a clash raises
        ``UniqueConflict`` and inserts none of the batch) and queues are woken. Returns how
        many jobs were inserted. ``validated``: the caller already ran ``validate_spec``
        on every spec."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        if not specs:
            return 0
        direct = all(spec.unique_key is None and spec.run_at is None for spec in specs)
        insert = self._copy_direct if direct else self._copy_insert
        async with translated_errors():
            if uow is None:
                async with self._tx() as conn:
                    return await insert(conn, specs)
            if not isinstance(uow, PgUnitOfWork) or uow.owner is not self:
                raise DatabaseError("the unit of work does not belong to this engine")
            if not uow.open:
                raise DatabaseError("the unit of work is already closed")
            async with uow.conn.transaction():
                return await insert(uow.conn, specs)

    async def _copy_direct(self, conn: DictConnection, specs: Sequence[JobSpec]) -> int:
        """Every job available and none with a unique key: reserve ids, lanes, slot and fact
        ids in one statement, then copy the rows (text format, encoded here) straight into
        ``ready_entries``; counters and wake-ups follow in one pipelined round trip."""
        now = self._clock.now()
        keyed = {spec.queue for spec in specs if spec.ordering_key is not None}
        if keyed:
            await self._load_shards(conn, keyed)
        # Lanes in input order of first appearance: count, first and last input position.
        lane_of: list[tuple[str, int, int | None]] = []
        groups: dict[tuple[str, int, int | None], list[int]] = {}
        for pos, spec in enumerate(specs, 1):
            key = spec.ordering_key
            lane = (
                spec.queue,
                spec.priority,
                None if key is None else shard_for_key(key, self._shard_count(spec.queue)),
            )
            lane_of.append(lane)
            group = groups.get(lane)
            if group is None:
                groups[lane] = [1, pos, pos]
            else:
                group[0] += 1
                group[2] = pos
        order = sorted(groups, key=lambda lane: (lane[0], lane[1], lane[2] is None, lane[2]))
        (row,) = await self._exec(
            conn,
            "copy_begin",
            n=len(specs),
            now=now,
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
            hints=[self._hint(lane[0]) for lane in order],
            counts=[groups[lane][0] for lane in order],
            firsts=[groups[lane][1] for lane in order],
            lasts=[groups[lane][2] for lane in order],
        )
        ids: list[int] = row["ids"]
        facts: list[int] = row["facts"]
        slot = str(row["slot"])
        nxt: dict[tuple[str, int, int | None], list[Any]] = {}
        for queue, priority, asked, shard, next_seq in row["lanes"]:
            lane = (queue, priority, asked)
            nxt[lane] = [str(shard), next_seq - groups[lane][0]]
        stamp = _copy_text(now.isoformat())
        # The text around args and metadata is the same for every job sharing kind, queue,
        # priority, max_attempts, tags and unique states (usually the whole batch).
        shapes: dict[tuple[Any, ...], tuple[str, str, str, str]] = {}
        dumps = json.dumps
        copy_sql = self._sql["copy_direct"]
        rows = zip(specs, lane_of, ids, facts, strict=True)
        async with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            # Sent in pieces while the next ones are encoded, so the server stores rows
            # while this process encodes the rest.
            while piece := list(itertools.islice(rows, _COPY_PIECE)):
                out: list[str] = []
                append = out.append
                for spec, lane, job_id, fact in piece:
                    at = nxt[lane]
                    seq = at[1]
                    at[1] = seq + 1
                    shape_key = (
                        spec.kind,
                        spec.queue,
                        spec.priority,
                        spec.max_attempts,
                        spec.tags,
                        spec.unique_states,
                    )
                    shape = shapes.get(shape_key)
                    if shape is None:
                        shape = shapes[shape_key] = _copy_shape(spec, slot, stamp)
                    key = spec.ordering_key
                    meta = spec.metadata
                    append(
                        f"{shape[0]}{fact}\t{at[0]}\t{seq}\t{job_id}\t{shape[1]}"
                        f"{dumps(spec.args).replace(BACKSLASH, ESCAPED)}\t{shape[2]}"
                        f"{dumps(meta).replace(BACKSLASH, ESCAPED) if meta else '{}'}\t"
                        f"{shape[3]}{NULL if key is None else HEX + key.hex()}\n"
                    )
                await copy.write("".join(out).encode())
        writes = Writes(now)
        for lane, (count, _first, _last) in groups.items():
            writes.counts[(lane[0], "available")] += count
            writes.notify.add((queue_channel(lane[0]), ""))
        async with conn.pipeline():
            await self._flush(conn, writes, producer=True)
        return len(specs)

    async def _copy_insert(self, conn: DictConnection, specs: Sequence[JobSpec]) -> int:
        writes = Writes(self._clock.now())
        rows = await self._exec(conn, "next_job_ids", n=len(specs))
        records = [
            _new_record(row["id"], spec, writes.now) for row, spec in zip(rows, specs, strict=True)
        ]
        await self._unique(conn, [(None, job) for job in records])
        ready = [
            (job, spec.ordering_key)
            for job, spec in zip(records, specs, strict=True)
            if job.state == JobState.Available
        ]
        lanes = iter(await self._reserve(conn, ready) if ready else [])
        self._stage_seq += 1
        stage = sql.Identifier(f"awa_copy_stage_{self._stage_seq}")
        await run(conn, self._sql.render("create_copy_stage", stage=stage))
        copy_sql = self._sql.render("copy_stage", stage=stage)
        async with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(list(_STAGE_TYPES))
            for job, spec in zip(records, specs, strict=True):
                shard, seq = next(lanes) if job.state == JobState.Available else (None, None)
                await copy.write_row(
                    (
                        job.id,
                        job.kind,
                        job.queue,
                        Jsonb(job.args),
                        job.priority,
                        job.max_attempts,
                        job.run_at,
                        job.created_at,
                        Jsonb(job.metadata),
                        list(job.tags),
                        job.unique_key,
                        None if job.unique_states is None else mask_to_bitstring(job.unique_states),
                        spec.ordering_key,
                        shard,
                        seq,
                        job.state.sql_name,
                    )
                )
        await run(conn, self._sql.render("copy_ready", stage=stage))
        await run(conn, self._sql.render("copy_deferred", stage=stage))
        for job in records:
            writes.move(None, job)
        await self._flush(conn, writes, producer=True)
        return len(records)

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        for spec in specs:
            validate_spec(spec)
        inserted: list[JobRecord] = []
        async with translated_errors(), self._tx() as conn:
            for spec in specs:
                try:
                    async with conn.transaction():
                        inserted.extend(await self._insert(conn, [spec]))
                except UniqueConflict:
                    continue
        return inserted

    # ---------------------------------------------------------------- workers
    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        now = self._clock.now()
        # Integer microseconds, so the database ages exactly like PriorityAging.
        aging_us = 0 if aging_interval is None else aging_interval // timedelta(microseconds=1)
        deadline_at = None if deadline is None else now + deadline
        params = {
            "queue": queue,
            "limit": limit,
            "now": now,
            "aging_us": aging_us,
            "deadline_at": deadline_at,
        }
        claims: list[Claim] = []
        # A claim statement leaves alone a lane that a cancel (or any writer retiring an
        # unclaimed row) marked after the statement's snapshot was taken, and says so
        # (`contested`); the rest of the batch is claimed again at once, under a newer
        # snapshot (ADR 0006, "Retiring unclaimed rows").
        for _ in range(_CONTESTED_TRIES):
            params["limit"] = limit - len(claims)
            if queue not in self._sorting:
                # The common case: one statement claims, moves the cursors and counts.
                async with translated_errors(), self._kept_conn("claim") as conn:
                    rows = await self._exec(conn, "claim", **params)
                if not (rows and rows[0]["mixed"]):
                    got = self._remember(queue, rows, deadline_at)
                    claims.extend(got)
                    if not (rows and rows[0]["contested"]) or len(claims) >= limit:
                        return claims
                    continue
                self._sorting.add(queue)
            try:
                got, contested = await self._claim_sorted(queue, params, now, deadline_at)
            except _Contested:
                continue
            claims.extend(got)
            if not contested or len(claims) >= limit:
                return claims
        return claims

    async def _claim_sorted(
        self,
        queue: str,
        params: dict[str, Any],
        now: datetime,
        deadline_at: datetime | None,
    ) -> tuple[list[Claim], bool]:
        """claim_sorted in a transaction with the cursor moves, unique keys and counters;
        raises _Contested (nothing written) when a row it took from a sorted window was
        claimed or tombstoned by a transaction that committed while it took its locks.
        Returns the claims and whether a lane was left alone because a retiring writer
        marked it after the statement's snapshot."""
        async with translated_errors(), self._tx(pipeline=True) as conn:
            rows = await self._exec(conn, "claim_sorted", **params)
            if rows and rows[0]["mixed"]:
                self._sorting.add(queue)
            else:
                self._sorting.discard(queue)
            contested = bool(rows and rows[0]["contested"])
            taken = [row for row in rows if row["id"] is not None]
            if not taken:
                return [], contested
            # The claim moved the cursors of ordered lanes itself; sorted windows are
            # moved over their claimed prefix here.
            sorted_lanes = [r for r in taken if r["disordered"]]
            if sorted_lanes and await self._exec(
                conn,
                "contested_claims",
                slots=[r["slot"] for r in sorted_lanes],
                facts=[r["ready_fact"] for r in sorted_lanes],
                claims=[r["claim_id"] for r in sorted_lanes],
            ):
                raise _Contested()
            if sorted_lanes:
                await self._exec(
                    conn,
                    "advance_cursors",
                    queues=[queue] * len(sorted_lanes),
                    priorities=[r["priority"] for r in sorted_lanes],
                    shards=[r["shard"] for r in sorted_lanes],
                )
            claims = self._remember(queue, taken, deadline_at)
            changes = [
                (attrs.evolve(c.job, state=JobState.Available), c.job)
                for c in claims
                if c.job.unique_key is not None
            ]
            writes = Writes(now)
            # Every claimed job moved from available to running in this queue.
            writes.counts[(queue, JobState.Available.sql_name)] -= len(taken)
            writes.counts[(queue, JobState.Running.sql_name)] += len(taken)
            if changes:
                await self._unique(conn, changes)
            await self._flush(conn, writes)
        return claims, contested

    async def warm_up(self, queues: Sequence[str]) -> None:
        """:class:`~awa.ports.storage.WorkerWarmUp`: open the connections kept for the
        claim and for completion by receipt, and plan both statements on them (the claim
        is only explained, the completion runs on nothing). A new backend otherwise loads
        the catalog of every ring partition on its first call, tens of ms on the first
        jobs' path."""
        if not queues:
            return
        now = self._clock.now()
        async with translated_errors():
            async with self._kept_conn("claim") as conn:
                params = {
                    "queue": queues[0],
                    "limit": 1,
                    "now": now,
                    "aging_us": 0,
                    "deadline_at": None,
                }
                await run(conn, self._sql["explain_claim"], params)
            async with self._kept_conn("complete") as conn:
                await self._exec_generic(
                    conn,
                    "complete_receipts_counted",
                    now=now,
                    minute=minute_of(now),
                    ids=[],
                    leases=[],
                    slots=[],
                    claims=[],
                    queues=[],
                )

    def _remember(
        self, queue: str, rows: Sequence[dict[str, Any]], deadline_at: datetime | None
    ) -> list[Claim]:
        """Claims from claim rows; receipts of jobs without a unique key are remembered
        so their completion is closed by key (complete_receipts_counted)."""
        receipts = self._receipts
        if len(receipts) + len(rows) > _RECEIPT_CACHE_LIMIT:
            # Oldest first: those attempts finished (or were rescued) long ago.
            for key in list(itertools.islice(receipts, len(receipts) // 2)):
                del receipts[key]
        claims = []
        for row in rows:
            if row["id"] is None:
                continue
            job = _claimed_job(row)
            if job.unique_key is None:
                receipts[(job.id, job.run_lease)] = (row["slot"], row["claim_id"], queue)
            claims.append(Claim(job=job, lease=job.lease, deadline_at=deadline_at))
        return claims

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        if not leases:
            return []
        receipts = self._receipts
        known: dict[tuple[int, int], tuple[int, int, str]] = {}
        for lease in leases:
            key = (lease.job_id, lease.lease)
            found = receipts.pop(key, None)
            if found is not None:
                known[key] = found
        if not known:
            return await self._complete_by_lookup(leases)
        now = self._clock.now()
        keys = list(known)
        params = {
            "now": now,
            "minute": minute_of(now),
            "ids": [k[0] for k in keys],
            "leases": [k[1] for k in keys],
            "slots": [known[k][0] for k in keys],
            "claims": [known[k][1] for k in keys],
            "queues": [known[k][2] for k in keys],
        }
        # One statement on its own: closures, counters and completion buckets. A closure
        # committed by a racing finaliser meanwhile fails it on the closure key (nothing
        # was written); the arbitrated form then lets the key decide.
        async with translated_errors(), self._kept_conn("complete") as conn:
            try:
                rows = await self._exec_generic(conn, "complete_receipts_counted", **params)
            except psycopg.errors.UniqueViolation:
                rows = await self._exec_generic(conn, "complete_receipts_arbitrated", **params)
        closed = {r["claim_id"] for r in rows if r["claim_id"] is not None}
        acks: dict[tuple[int, int], Ack] = {}
        for key, (_, claim_id, _queue) in known.items():
            if claim_id in closed:
                acks[key] = Ack.APPLIED
        # A receipt that closed nothing is looked up by job id: its attempt may have a
        # lease, or prune may have carried it into another slot (ADR 0006,
        # "Carry-forward of live rows"); a finalised one is STALE there too.
        rest = [lease for lease in leases if (lease.job_id, lease.lease) not in acks]
        by_lookup = iter(await self._complete_by_lookup(rest)) if rest else iter(())
        out: list[Ack] = []
        answered: set[tuple[int, int]] = set()
        for lease in leases:
            key = (lease.job_id, lease.lease)
            if key in acks:
                # A lease listed twice is applied once; the repeat is stale.
                out.append(acks[key] if key not in answered else Ack.STALE)
                answered.add(key)
            else:
                out.append(next(by_lookup))
        return out

    async def _complete_by_lookup(self, leases: Sequence[RunLease]) -> list[Ack]:
        async with translated_errors(), self._tx(pipeline=True) as conn:
            writes = Writes(self._clock.now())
            # Short attempts (no lease, no unique key) are found and closed in one
            # statement; otherwise the snapshots are read before anything is closed.
            open_rows = await self._exec(
                conn,
                "complete_short",
                now=writes.now,
                ids=[lease.job_id for lease in leases],
                leases=[lease.lease for lease in leases],
            )
            by_lease = {(r["job_id"], r["run_lease"]): r for r in open_rows}
            snapshots: dict[int, Resolved] = {}
            if open_rows and open_rows[0]["short"]:
                won = {r["claim_id"] for r in open_rows if r["closed"]}
            else:
                wide = [
                    r["job_id"] for r in open_rows if r["has_lease"] or r["unique_key"] is not None
                ]
                snapshots = await self._resolve(conn, wide) if wide else {}
                order = sorted(by_lease.values(), key=lambda r: (r["slot"], r["claim_id"]))
                closed = await self._exec(
                    conn,
                    "close_claims",
                    now=writes.now,
                    slots=[r["slot"] for r in order],
                    claims=[r["claim_id"] for r in order],
                    queues=[r["queue"] for r in order],
                    outcomes=["moved" if r["has_lease"] else "completed" for r in order],
                )
                won = {r["claim_id"] for r in closed}
            acks: list[Ack] = []
            seen: set[tuple[int, int]] = set()
            done: list[tuple[JobRecord, bytes | None]] = []
            unique_changes = []
            for lease in leases:
                key = (lease.job_id, lease.lease)
                row = by_lease.get(key)
                applied = row is not None and row["claim_id"] in won and key not in seen
                seen.add(key)
                acks.append(_ack(applied))
                if not applied or row is None:
                    continue
                before_state = JobState.WaitingExternal if row["waiting"] else JobState.Running
                snap = snapshots.get(lease.job_id)
                if snap is not None:
                    before = snap.job
                    after = attrs.evolve(
                        before, state=JobState.Completed, finalized_at=writes.now, progress=None
                    )
                    if row["has_lease"]:
                        done.append((after, snap.ordering_key))
                    unique_changes.append((before, after))
                writes.counts[(row["queue"], before_state.sql_name)] -= 1
                writes.counts[(row["queue"], JobState.Completed.sql_name)] += 1
                writes.completed(row["queue"], writes.now, 1)
            if done:
                await self._place(conn, done)
            await self._unique(conn, unique_changes)
            await self._flush(conn, writes)
        return acks

    async def _live_op(
        self,
        lease: RunLease,
        decide: Callable[[JobRecord, Writes], tuple[JobRecord | None, str | None]],
        states: frozenset[JobState] = LIVE_STATES,
    ) -> Ack:
        """Guarded change of one live attempt: ``decide`` returns the next snapshot and,
        when the job goes to the DLQ, the reason."""
        # The attempt leaves the short path: its completion (if any) is looked up.
        self._receipts.pop((lease.job_id, lease.lease), None)
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            found = (await self._resolve(conn, [lease.job_id])).get(lease.job_id)
            if (
                found is None
                or not found.open_claim
                or found.job.run_lease != lease.lease
                or found.job.state not in states
            ):
                return Ack.STALE
            new, dlq_reason = decide(found.job, writes)
            if new is not None and new.state in LIVE_STATES:
                applied = await self._save_lease(conn, found, new)
                if applied:
                    writes.move(found.job, new)
            else:
                applied = await self._transition(conn, writes, found, new, dlq_reason=dlq_reason)
            if not applied:
                # Raising rolls back whatever this transaction wrote so far.
                raise _Stale()
            await self._flush(conn, writes)
        return Ack.APPLIED

    async def _guarded(
        self,
        lease: RunLease,
        decide: Callable[[JobRecord, Writes], tuple[JobRecord | None, str | None]],
        states: frozenset[JobState] = LIVE_STATES,
    ) -> Ack:
        try:
            return await self._live_op(lease, decide, states)
        except _Stale:
            return Ack.STALE

    async def _save_lease(self, conn: DictConnection, found: Resolved, new: JobRecord) -> bool:
        """Write the mutable part of a live attempt into its lease row (in the current
        lease slot); false when the claim closed meanwhile."""
        assert found.ready_slot is not None and found.claim_id is not None
        (locked,) = await self._exec(conn, "lock_leases", schema=self._schema, ids=[new.id])
        rows = await self._exec(
            conn,
            "save_lease",
            slot=locked["lease_slot"],
            job_id=new.id,
            claim_slot=found.ready_slot,
            claim_id=found.claim_id,
            waiting=new.state == JobState.WaitingExternal,
            heartbeat_at=new.heartbeat_at,
            progress=None if new.progress is None else json.dumps(new.progress),
            metadata=json.dumps(new.metadata),
            callback_id=new.callback_id,
            callback_timeout_at=new.callback_timeout_at,
            deadline_at=new.deadline_at,
        )
        return bool(rows)

    def _fail_or_dlq(
        self,
        job: JobRecord,
        writes: Writes,
        errors: tuple[dict[str, Any], ...],
        reason: str,
        **changes: Any,
    ) -> tuple[JobRecord, str | None]:
        failed = attrs.evolve(
            job, state=JobState.Failed, errors=errors, finalized_at=writes.now, **changes
        )
        return failed, (reason if job.queue in self._dlq_queues else None)

    def _retry_or_fail(
        self,
        job: JobRecord,
        writes: Writes,
        *,
        error: str,
        delay: timedelta | None,
        dlq_reason: str = "max_attempts_exhausted",
        **changes: Any,
    ) -> tuple[JobRecord, str | None]:
        errors = (*job.errors, error_entry(error, attempt=job.attempt, at=writes.now))
        if job.attempt >= job.max_attempts:
            return self._fail_or_dlq(job, writes, errors, dlq_reason, **changes)
        wait = delay if delay is not None else self._backoff.delay(job.attempt)
        return (
            attrs.evolve(
                job,
                state=JobState.Retryable,
                errors=errors,
                run_at=writes.now + wait,
                **changes,
            ),
            None,
        )

    _dlq_queues: frozenset[str] = frozenset()

    async def _refresh_dlq(self) -> None:
        async with self._tx() as conn:
            rows = await self._exec(conn, "dlq_queues")
            self._dlq_queues = frozenset(row["queue"] for row in rows)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        await self._refresh_dlq()
        return await self._guarded(
            lease, lambda job, w: self._retry_or_fail(job, w, error=error, delay=delay)
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self._guarded(
            lease,
            lambda job, w: (
                attrs.evolve(
                    job, state=JobState.Scheduled, run_at=w.now + delay, attempt=job.attempt - 1
                ),
                None,
            ),
            # A parked attempt has no handler left to snooze it.
            RUNNING_ONLY,
        )

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self._guarded(
            lease,
            lambda job, w: (
                attrs.evolve(job, state=JobState.Cancelled, finalized_at=w.now),
                None,
            ),
        )

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        await self._refresh_dlq()

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            entry = error_entry(error, attempt=job.attempt, at=w.now, terminal=True)
            return self._fail_or_dlq(job, w, (*job.errors, entry), "terminal_error")

        return await self._guarded(lease, decide)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            entry = error_entry(error, attempt=job.attempt, at=w.now)
            return (
                attrs.evolve(
                    job,
                    state=JobState.Retryable,
                    run_at=w.now,
                    attempt=job.attempt - 1,
                    errors=(*job.errors, entry),
                ),
                None,
            )

        return await self._guarded(lease, decide)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        if not leases:
            return []
        ids = [lease.job_id for lease in leases]
        async with translated_errors(), self._tx(pipeline=True) as conn:
            (locked,) = await self._exec(conn, "lock_leases", schema=self._schema, ids=ids)
            rows = await self._exec(
                conn,
                "heartbeat",
                slot=locked["lease_slot"],
                now=self._clock.now(),
                ids=[lease.job_id for lease in leases],
                leases=[lease.lease for lease in leases],
            )
        alive = {(r["job_id"], r["run_lease"]) for r in rows}
        return [_ack((lease.job_id, lease.lease) in alive) for lease in leases]

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        return await self._guarded(
            lease,
            lambda job, w: (
                attrs.evolve(
                    job,
                    progress=job.progress if progress is None else dict(progress),
                    metadata={**job.metadata, **(metadata_updates or {})},
                    heartbeat_at=w.now,
                ),
                None,
            ),
        )

    # ---------------------------------------------------------------- callbacks
    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        ack = await self._guarded(
            lease,
            lambda job, w: (
                attrs.evolve(job, callback_id=callback_id, callback_timeout_at=w.now + timeout),
                None,
            ),
            RUNNING_ONLY,
        )
        if ack is Ack.APPLIED and expressions is not None and not expressions.is_empty:
            async with translated_errors(), self._tx() as conn:
                await self._exec(
                    conn,
                    "save_callback_expressions",
                    callback_id=callback_id,
                    schema=self._schema,
                    job_id=lease.job_id,
                    run_lease=lease.lease,
                    filter=expressions.filter,
                    on_complete=expressions.on_complete,
                    on_fail=expressions.on_fail,
                    transform=expressions.transform,
                )
        return ack

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        lease = await self._by_callback(callback_id)
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(
                conn,
                "load_callback_expressions",
                callback_id=callback_id,
                job_id=lease.job_id,
                run_lease=lease.lease,
            )
        if not rows:
            return None
        row = rows[0]
        return CallbackExpressions(
            filter=row["filter"],
            on_complete=row["on_complete"],
            on_fail=row["on_fail"],
            transform=row["transform"],
        )

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            if job.callback_id is None:
                raise _Stale()
            return attrs.evolve(job, state=JobState.WaitingExternal), None

        return await self._guarded(lease, decide, RUNNING_ONLY)

    async def _by_callback(self, callback_id: str) -> RunLease:
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, "lease_by_callback", callback_id=callback_id)
            resolved = await self._resolve(conn, [r["job_id"] for r in rows])
        for row in rows:
            found = resolved.get(row["job_id"])
            if (
                found is not None
                and found.open_claim
                and found.job.run_lease == row["run_lease"]
                and found.job.callback_id == callback_id
                and found.job.state in LIVE_STATES
            ):
                return found.job.lease
        raise callback_not_found(callback_id)

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        check_action(action)
        await self._refresh_dlq()
        lease = await self._by_callback(callback_id)
        result: list[JobRecord] = []
        cleared: dict[str, Any] = dict(CLEARED)

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            outcome: tuple[JobRecord, str | None]
            if action == "complete":
                outcome = (
                    attrs.evolve(
                        job,
                        state=JobState.Completed,
                        finalized_at=w.now,
                        progress=None,
                        **cleared,
                    ),
                    None,
                )
            elif action == "fail":
                entry = failure_entry(error, attempt=job.attempt, at=w.now, expression=expression)
                outcome = self._fail_or_dlq(
                    job, w, (*job.errors, entry), CALLBACK_FAILED_REASON, **cleared
                )
            elif action == "retry":
                outcome = (attrs.evolve(job, **retry_changes(w.now)), None)
            else:
                outcome = (attrs.evolve(job, **resume_changes(job, payload, w.now)), None)
            result.append(outcome[0])
            return outcome

        ack = await self._guarded(lease, decide)
        if ack is Ack.STALE:
            raise callback_not_found(callback_id)
        async with translated_errors(), self._tx() as conn:
            await self._exec(conn, "drop_callback_expressions", callback_id=callback_id)
        return result[-1]

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        lease = await self._by_callback(callback_id)
        result: list[JobRecord] = []

        def decide(job: JobRecord, w: Writes) -> tuple[JobRecord, str | None]:
            result.append(attrs.evolve(job, callback_timeout_at=w.now + timeout))
            return result[-1], None

        if await self._guarded(lease, decide) is Ack.STALE:
            raise callback_not_found(callback_id)
        return result[-1]

    # ---------------------------------------------------------------- maintenance
    async def promote_due(self, *, limit: int = 4096) -> int:
        if limit <= 0:
            return 0
        async with translated_errors(), self._tx() as conn:
            writes = Writes(self._clock.now())
            rows = await self._exec(conn, "due_deferred", now=writes.now, limit=limit)
            if not rows:
                return 0
            rows.sort(key=lambda r: (r["run_at"], r["job_id"]))
            items = []
            changes = []
            for row in rows:
                before = Resolved.from_row(
                    {
                        **row,
                        "id": row["job_id"],
                        "ready_slot": None,
                        "ready_fact": None,
                        "claim_id": None,
                        "open_claim": False,
                    }
                )
                after = attrs.evolve(before.job, state=JobState.Available)
                items.append((after, before.ordering_key))
                changes.append((before.job, after))
                writes.move(before.job, after)
            await self._unique(conn, changes)
            await self._place(conn, items)
            await self._flush(conn, writes)
        return len(rows)

    async def _rescue(
        self,
        query: str,
        reason: str,
        *,
        dlq_reason: str = "max_attempts_exhausted",
        **params: Any,
    ) -> list[Rescued]:
        await self._refresh_dlq()
        async with translated_errors(), self._tx() as conn:
            rows = await self._exec(conn, query, **params)
        rescued: list[Rescued] = []
        clear: dict[str, Any] = (
            {"callback_id": None, "callback_timeout_at": None}
            if query == "expired_callbacks"
            else {}
        )
        for row in rows:
            lease = RunLease(row["job_id"], row["run_lease"])
            states: list[JobState] = []

            def decide(
                job: JobRecord, w: Writes, states: list[JobState] = states
            ) -> tuple[JobRecord, str | None]:
                new, dlq = self._retry_or_fail(
                    job, w, error=reason, delay=None, dlq_reason=dlq_reason, **clear
                )
                states.append(new.state)
                return new, dlq

            expected = (
                frozenset({JobState.WaitingExternal})
                if query == "expired_callbacks"
                else RUNNING_ONLY
            )
            if await self._guarded(lease, decide, expected) is Ack.APPLIED:
                rescued.append(Rescued(lease=lease, new_state=states[-1], reason=reason))
        return rescued

    async def rescue_stale_heartbeats(self, *, staleness: timedelta) -> list[Rescued]:
        return await self._rescue(
            "stale_heartbeats", "heartbeat stale", cutoff=self._clock.now() - staleness
        )

    async def rescue_expired_deadlines(self) -> list[Rescued]:
        return await self._rescue("expired_deadlines", "deadline exceeded", now=self._clock.now())

    async def rescue_expired_callbacks(self) -> list[Rescued]:
        return await self._rescue(
            "expired_callbacks",
            "callback timed out",
            dlq_reason="callback_timeout",
            now=self._clock.now(),
        )


class _Stale(Exception):
    """The attempt changed underneath: roll the transaction back and report stale."""
