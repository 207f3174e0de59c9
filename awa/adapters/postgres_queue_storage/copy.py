"""Bulk enqueue through ``COPY`` (the last two rows of the table in :mod:`.enqueue`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.unique_conflicts import merging
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.lanes import Lane, LaneAllocator
from awa.adapters.postgres_queue_storage.snapshots import Writes, new_record, restamped
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.domain.channels import queue_channel
from awa.domain.flow_control import concurrency_key_of
from awa.domain.job import JobRecord, JobSpec
from awa.domain.partitioning import shard_for_key
from awa.domain.states import JobState, mask_to_bitstring
from awa.domain.validation import validate_spec
from awa.ports.clock import Clock
from awa.ports.storage import UnitOfWork

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


def _copy_shape(spec: JobSpec, slot: str, stamp: str) -> tuple[str, str, str, str, str]:
    """The fixed text of a direct-COPY row of ``spec``: before the fact id (slot), between
    the job id and args (kind, queue), between args and metadata (priority, attempt,
    max_attempts, then after the lane's run_at: created_at, errors) and between metadata
    and the ordering key (tags, unique states, run lease)."""
    return (
        f"{slot}\t",
        f"{_copy_text(spec.kind)}\t{_copy_text(spec.queue)}\t",
        f"{spec.priority}\t0\t{spec.max_attempts}\t",
        f"\t{stamp}\t{{}}\t",
        f"{_copy_text(_text_array(spec.tags))}\t"
        f"{mask_to_bitstring(spec.effective_unique_states)}\t0\t",
    )


class CopyEnqueue:
    """``enqueue_many_copy``: a direct COPY into the ready rows, or a staged one."""

    def __init__(
        self,
        *,
        owner: object,
        connections: Connections,
        statements: Statements,
        lanes: LaneAllocator,
        facts: FactWriter,
        clock: Clock,
        general: Callable[[DictConnection, Sequence[JobSpec]], Awaitable[list[JobRecord]]],
    ) -> None:
        self._owner = owner
        # The general enqueue (ids, unique keys, rows), for jobs that merge into a waiting
        # holder of their key instead of being copied (ADR 0034).
        self._general = general
        self._connections = connections
        self._sql = statements
        self._lanes = lanes
        self._facts = facts
        self._clock = clock
        # Staging tables made by this engine (each COPY's table gets a fresh name).
        self._stages = 0

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
        # A job with a concurrency key takes the staged path, whose lanes LaneAllocator
        # places (its key's own lane, ADR 0029).
        direct = all(
            spec.unique_key is None
            and spec.run_at is None
            and concurrency_key_of(spec.metadata) is None
            for spec in specs
        )
        insert = self._copy_direct if direct else self._copy_insert
        if any(merging(spec) for spec in specs):
            insert = self._copy_merging
        async with translated_errors():
            if uow is None:
                async with self._connections.tx() as conn:
                    return await insert(conn, specs)
            conn = self._connections.owned(uow, self._owner)
            async with conn.transaction():
                return await insert(conn, specs)

    async def _copy_merging(self, conn: DictConnection, specs: Sequence[JobSpec]) -> int:
        """Jobs with a ``replace`` / ``debounce`` mode go one by one through the general
        enqueue, which merges each into a waiting holder of its key; the rest are copied.
        Every job counts: a merged one is a job the caller sees written."""
        plain = [spec for spec in specs if not merging(spec)]
        count = await self._copy_insert(conn, plain) if plain else 0
        keyed = [spec for spec in specs if merging(spec)]
        return count + len(await self._general(conn, keyed))

    async def _copy_direct(self, conn: DictConnection, specs: Sequence[JobSpec]) -> int:
        """Every job available and none with a unique key: reserve ids, lanes, slot and fact
        ids in one statement, then copy the rows (text format, encoded here) straight into
        ``ready_entries``; counters and wake-ups follow in one pipelined round trip."""
        now = self._clock.now()
        keyed = {spec.queue for spec in specs if spec.ordering_key is not None}
        if keyed:
            await self._lanes.load_shards(conn, keyed)
        # Lanes in input order of first appearance: count, first and last input position.
        lane_of: list[Lane] = []
        groups: dict[Lane, list[int]] = {}
        for pos, spec in enumerate(specs, 1):
            key = spec.ordering_key
            lane = (
                spec.queue,
                spec.priority,
                None if key is None else shard_for_key(key, self._lanes.shard_count(spec.queue)),
            )
            lane_of.append(lane)
            group = groups.get(lane)
            if group is None:
                groups[lane] = [1, pos, pos]
            else:
                group[0] += 1
                group[2] = pos
        order = sorted(groups, key=lambda lane: (lane[0], lane[1], lane[2] is None, lane[2]))
        (row,) = await self._sql.exec(
            conn,
            "copy_begin",
            n=len(specs),
            now=now,
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
            hints=[self._lanes.hint(lane[0]) for lane in order],
            counts=[groups[lane][0] for lane in order],
            firsts=[groups[lane][1] for lane in order],
            lasts=[groups[lane][2] for lane in order],
        )
        ids: list[int] = row["ids"]
        facts: list[int] = row["facts"]
        slot = str(row["slot"])
        # Per lane: shard, next position, and the run_at of its rows (lane_stamp: ``now``,
        # or just after the lane's tail when it got the lane after a later producer).
        nxt: dict[Lane, list[Any]] = {}
        for queue, priority, asked, shard, next_seq, run_at in row["lanes"]:
            lane = (queue, priority, asked)
            nxt[lane] = [str(shard), next_seq - groups[lane][0], _copy_text(run_at)]
        stamp = _copy_text(now.isoformat())
        # The text around args and metadata is the same for every job sharing kind, queue,
        # priority, max_attempts, tags and unique states (usually the whole batch).
        shapes: dict[tuple[Any, ...], tuple[str, str, str, str, str]] = {}
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
                        f"{at[2]}{shape[3]}"
                        f"{dumps(meta).replace(BACKSLASH, ESCAPED) if meta else '{}'}\t"
                        f"{shape[4]}{NULL if key is None else HEX + key.hex()}\n"
                    )
                await copy.write("".join(out).encode())
        writes = Writes(now)
        for lane, (count, _first, _last) in groups.items():
            writes.counts[(lane[0], "available")] += count
            writes.notify.add((queue_channel(lane[0]), ""))
        async with conn.pipeline():
            await self._facts.flush(conn, writes, producer=True)
        return len(specs)

    async def _copy_insert(self, conn: DictConnection, specs: Sequence[JobSpec]) -> int:
        writes = Writes(self._clock.now())
        rows = await self._sql.exec(conn, "next_job_ids", n=len(specs))
        records = [
            new_record(row["id"], spec, writes.now) for row, spec in zip(rows, specs, strict=True)
        ]
        await self._facts.unique(conn, [(None, job) for job in records])
        ready = [
            (job, spec.ordering_key)
            for job, spec in zip(records, specs, strict=True)
            if job.state == JobState.Available
        ]
        placed = await self._lanes.reserve(conn, ready, stamp=writes.now) if ready else []
        moved = {
            job.id: at
            for (job, _), (_, _, at) in zip(ready, placed, strict=True)
            if at != job.run_at
        }
        records = [restamped(job, moved) for job in records]
        lanes = iter(placed)
        self._stages += 1
        stage = sql.Identifier(f"awa_copy_stage_{self._stages}")
        await run(conn, self._sql.render("create_copy_stage", stage=stage))
        copy_sql = self._sql.render("copy_stage", stage=stage)
        async with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(list(_STAGE_TYPES))
            for job, spec in zip(records, specs, strict=True):
                shard, seq, _ = (
                    next(lanes) if job.state == JobState.Available else (None, None, None)
                )
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
        await self._facts.flush(conn, writes, producer=True)
        return len(records)
