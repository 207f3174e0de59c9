"""Enqueue: how a new job becomes facts.

Which statement writes a job depends on the call, on whether the jobs carry unique keys,
and on what else this engine is writing. This table is the whole decision (statements are
in ``enqueue.sql``, ``lanes.sql`` and ``facts.sql``; "general insert" is
:meth:`Enqueue.insert`: ``next_job_ids``, ``unique_claim``, ``reserve_lanes``,
``insert_ready`` / ``insert_deferred``, ``add_counts_free``, ``notify``):

==============================  ===================  ==================================
call                            jobs                 statements (transaction)
==============================  ===================  ==================================
``enqueue_many_routed``         one plain job [1]_,  joins the next group commit batch
                                another enqueue of   (:mod:`.group_commit`):
                                the engine in        ``enqueue_plain_routed`` for all
                                flight               jobs that arrived meanwhile; when
                                                     it wrote nothing (no free counter
                                                     bucket or lane for one of them),
                                                     ``enqueue_ready_routed``
                                                     (autocommit)
``enqueue_many_routed``         one plain job [1]_   ``enqueue_one_routed``; when it
                                                     wrote nothing (no free counter
                                                     bucket or lane yet),
                                                     ``enqueue_ready_routed``
                                                     (autocommit, each alone)
``enqueue_many_routed``         several plain jobs   ``enqueue_plain_routed``, as above
``enqueue_many_routed``         any other, no        ``enqueue_ready_routed``
                                unique key [2]_      (autocommit)
``enqueue_many``, no unit of    no unique key        ``generic_plans`` +
work                                                 ``enqueue_ready`` (one pipelined
                                                     transaction)
``enqueue_many``, no unit of    a unique key         general insert (one pipelined
work                                                 transaction)
``enqueue_many`` in a unit of   no unique key        ``generic_plans`` +
work                                                 ``enqueue_ready`` +
                                                     ``restore_plans`` (caller's)
``enqueue_many`` in a unit of   a unique key         general insert (caller's, no
work                                                 savepoint)
``enqueue_many_skip_duplicates``  any                general insert per job, each in a
                                                     savepoint (one transaction)
``enqueue_many_copy``           all available, no    ``copy_begin``, ``COPY``
                                unique key           ``copy_direct``, counters
                                                     (:mod:`.copy`)
``enqueue_many_copy``           any other            ``next_job_ids``, unique keys,
                                                     ``reserve_lanes``, a staged
                                                     ``COPY``, ``copy_ready`` /
                                                     ``copy_deferred``, counters
==============================  ===================  ==================================

.. [1] available now, no ordering key, no unique key.
.. [2] ``enqueue_many_routed`` refuses unique keys.

Wake-ups: an enqueue that is the engine's only one in flight (and has no wake-up pending)
notifies inside its own statement, and so does every enqueue over a slow link
(:meth:`.GroupCommit.slow_link`); otherwise it leaves the wake-up to the
:class:`~.wakes.WakeCoalescer` after commit (a notifying transaction holds one
database-wide lock through its commit).
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import DictRow

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.piped import piped_transaction
from awa.adapters._pg.pool import DictConnection, is_pooled
from awa.adapters._pg.unique_conflicts import insert_merging
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.group_commit import GroupCommit
from awa.adapters.postgres_queue_storage.lanes import LaneAllocator
from awa.adapters.postgres_queue_storage.snapshots import Writes, new_record, restamped
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.adapters.postgres_queue_storage.wakes import WakeCoalescer
from awa.domain.channels import queue_channel
from awa.domain.errors import DatabaseError, UniqueConflict
from awa.domain.flow_control import concurrency_key_of
from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import mask_to_bitstring
from awa.domain.validation import validate_spec
from awa.ports.clock import Clock
from awa.ports.producers import RouteChanged
from awa.ports.storage import UnitOfWork

log = logging.getLogger("awa.adapters.postgres_queue_storage")


def _savepoint(conn: DictConnection) -> AbstractAsyncContextManager[Any]:
    """All or nothing inside the enqueue's transaction."""
    return conn.transaction()


#: Runs of the common insert that warm a new connection (:meth:`Enqueue.warm`): the
#: server plans a prepared statement anew for each of its first five runs, then settles on
#: its generic plan at the sixth.
WARM_RUNS = 6


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


def _one_plain_job(spec: JobSpec) -> bool:
    """An available job without ordering or unique key: enqueue_one_routed can take it."""
    return (
        spec.run_at is None
        and spec.ordering_key is None
        and spec.unique_key is None
        and concurrency_key_of(spec.metadata) is None
    )


class Enqueue:
    """Producers: caller transactions and every enqueue path but COPY (see the table)."""

    def __init__(
        self,
        *,
        owner: object,
        connections: Connections,
        statements: Statements,
        lanes: LaneAllocator,
        facts: FactWriter,
        group: GroupCommit,
        wakes: WakeCoalescer,
        clock: Clock,
    ) -> None:
        self._owner = owner
        self._connections = connections
        self._sql = statements
        self._lanes = lanes
        self._facts = facts
        self._group = group
        self._wakes = wakes
        self._clock = clock
        #: Connections :meth:`warm` prepared for the common insert.
        self._warmed: weakref.WeakSet[DictConnection] = weakref.WeakSet()

    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A caller transaction: enqueues made through it commit (and notify) together."""
        return self._connections.unit_of_work(self._owner)

    async def insert(self, conn: DictConnection, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """The general enqueue: ids first, unique keys claimed, then the rows placed; jobs
        with parents planned against them first and their edges stored after (ADR 0032)."""
        if any(spec.depends_on for spec in specs):
            return await pg_dependencies.insert_with_parents(
                conn,
                specs,
                lambda planned: self._insert_rows(conn, planned),
                self._clock.now(),
                schema=self._sql.schema,
            )
        # Jobs with a replace / debounce mode merge into a waiting holder (ADR 0034).
        return await insert_merging(
            conn,
            specs,
            self._clock.now(),
            lambda todo: self._insert_rows(conn, todo),
            _savepoint,
            self._sql.schema,
        )

    async def _insert_rows(self, conn: DictConnection, specs: Sequence[JobSpec]) -> list[JobRecord]:
        writes = Writes(self._clock.now())
        rows = await self._sql.exec(conn, "next_job_ids", n=len(specs))
        records = [
            new_record(row["id"], spec, writes.now) for row, spec in zip(rows, specs, strict=True)
        ]
        await self._facts.unique(conn, [(None, job) for job in records])
        moved = await self._facts.place(
            conn,
            [(job, spec.ordering_key) for job, spec in zip(records, specs, strict=True)],
            stamp=writes.now,
        )
        records = [restamped(job, moved) for job in records]
        for job in records:
            writes.move(None, job)
        await self._facts.flush(conn, writes, producer=True)
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
        if is_pooled(conn):
            # Nothing is prepared through a transaction-mode pooler: no plan to choose.
            return await run(conn, self._sql["enqueue_ready"], params)
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
            row = _job_fields(spec, states, self._lanes.hint(spec.queue) if available else None)
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
            "schema": self._sql.schema,
        }

    @staticmethod
    async def _records(
        cur: AsyncCursor[DictRow], specs: Sequence[JobSpec], now: datetime
    ) -> list[JobRecord]:
        """The records of an enqueue whose rows are ``(id, run_at)``, run_at being the
        available job's stamp under its lane's lock (NULL for a deferred job)."""
        rows = await cur.fetchall()
        return [
            new_record(row["id"], spec, now, stamp=row["run_at"])
            for row, spec in zip(rows, specs, strict=True)
        ]

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
            if spec.unique_key is not None or spec.depends_on:
                raise ValueError(
                    "enqueue_many_routed takes jobs without unique keys or parents only"
                )
        if not specs:
            return []
        if len(specs) == 1 and _one_plain_job(specs[0]):
            if self._group.in_flight:
                return [await self._group.join(specs[0], self._enqueue_routed)]
            return [await self._group.alone(specs[0], self._enqueue_routed)]
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

    async def _enqueue_fast(
        self, specs: Sequence[JobSpec], *, route_check: bool = False
    ) -> list[JobRecord]:
        """One round trip. With ``route_check``, one statement in autocommit: for a single
        plain job enqueue_one_routed, for several enqueue_plain_routed, and
        enqueue_ready_routed for anything else (or when those wrote nothing: a second round
        trip); otherwise BEGIN, the statement and COMMIT
        are pipelined and the ids are read once the pipeline is synced."""
        self._connections.check_open()
        wake: set[str] = set()
        # Alone, the enqueue notifies in its own transaction; next to other enqueues of
        # this engine it leaves the wake-up to the wake coalescer (one commit-long lock),
        # except over a slow link, where writes reach the server spread over the round
        # trip and a wake-up sent after commit would reach workers a round trip later.
        self._group.in_flight += 1
        try:
            async with self._connections.pool.connection() as conn:
                # Stamped once a connection is held: the wait for one does not count
                # against the stamp's slack in its lane (lane_stamp).
                now = self._clock.now()
                alone = (
                    self._group.in_flight == 1 and not self._wakes.pending
                ) or self._group.slow_link()
                records: list[JobRecord] = []
                params: dict[str, Any] | None = None
                if route_check and len(specs) == 1 and _one_plain_job(specs[0]):
                    records = await self._enqueue_one(conn, specs[0], now, alone, wake)
                elif route_check and all(_one_plain_job(spec) for spec in specs):
                    params = self._enqueue_params(specs, now, notify=alone, wake=wake)
                    cur = await run(conn, self._sql["enqueue_plain_routed"], params, prepare=True)
                    if cur.rowcount:
                        records = await self._records(cur, specs, now)
                if not records and route_check:
                    # One statement, its own transaction: one message and one round trip.
                    # (A batch enqueue_plain_routed did not write goes with its parameters.)
                    if params is None:
                        params = self._enqueue_params(specs, now, notify=alone, wake=wake)
                    cur = await run(conn, self._sql["enqueue_ready_routed"], params, prepare=True)
                    records = await self._records(cur, specs, now)
                elif not records:
                    async with piped_transaction(conn):
                        cur = await self._send_enqueue(conn, specs, now, notify=alone, wake=wake)
                    records = await self._records(cur, specs, now)
        finally:
            self._group.in_flight -= 1
        if wake and not alone:
            self._wakes.after_commit(wake)
        return records

    async def _enqueue_one(
        self, conn: DictConnection, spec: JobSpec, now: datetime, notify: bool, wake: set[str]
    ) -> list[JobRecord]:
        """enqueue_one_routed: the job's record, or ``[]`` (nothing written) when its queue
        has no free counter bucket or lane yet and the full statement must run."""
        channel = queue_channel(spec.queue)
        cur = await self._send_one(conn, spec, now, [channel] if notify else [])
        row = await cur.fetchone()
        if row is None:
            return []
        wake.add(channel)
        return [new_record(row["id"], spec, now, stamp=row["run_at"])]

    async def _send_one(
        self, conn: DictConnection, spec: JobSpec, now: datetime, channels: list[str]
    ) -> AsyncCursor[DictRow]:
        """Send enqueue_one_routed for ``spec`` (its row not read yet: outside a pipeline
        the caller reads it before anything else runs on ``conn``, so the statement runs on
        the connection's reused cursor)."""
        job = _job_fields(
            spec, mask_to_bitstring(spec.effective_unique_states), self._lanes.hint(spec.queue)
        )
        return await run(
            conn,
            self._sql["enqueue_one_routed"],
            {"job": json.dumps(job), "now": now, "channels": channels, "schema": self._sql.schema},
            prepare=True,
            reuse=True,
        )

    async def warm_routed(self) -> None:
        """:meth:`warm` a pooled connection unless it already is (the pool's first, opened
        before this engine was built): the routing engine's first routed insert to this
        engine waits for it, so the inserts after it do not. Best effort: a failure is
        logged at DEBUG and the inserts plan the statement themselves."""
        try:
            async with self._connections.conn() as conn:
                if conn not in self._warmed and not is_pooled(conn):
                    await self.warm(conn)
        except (psycopg.Error, OSError, DatabaseError) as exc:
            log.debug("warming a connection for routed inserts failed: %r", exc)

    async def warm(self, conn: DictConnection) -> None:
        """Prepare a new direct pool connection for the common insert, before the pool
        lends it out (:func:`~awa.adapters._pg.pool.add_warmer`): enqueue_one_routed runs
        WARM_RUNS times for a job of a queue no one can name (the empty name), which finds
        no counter bucket, writes nothing and returns no row (so nothing is notified: the
        notification is read only beside a written row), and enqueue_plain_routed and
        enqueue_ready_routed as many times each for an empty batch. By the time a caller's
        insert arrives the new backend has loaded the catalog and the server plans the
        three statements generically; it
        makes custom plans for a prepared statement's first five runs.

        All of it goes in one pipeline, one round trip: one run at a time held each new
        connection back from the producers for 12 round trips more. Over a 5 ms link
        (``benchmarks.pickup_breakdown --rtt 5``) a producer's first inserts took 17-31
        ms, against 9 ms after, for the first 0.17 s while its pool grew; 0.08 s so."""
        spec = JobSpec(kind="", queue="")
        now = self._clock.now()
        # And the statements of a batch of inserts that met on the wire (GroupCommit),
        # for no job at all: they read no input row, so they draw no id and lock no lane.
        batch = self._enqueue_params([], now, notify=True, wake=set())
        async with conn.pipeline():
            for _ in range(WARM_RUNS):
                await self._send_one(conn, spec, now, [queue_channel("")])
            for name in ("enqueue_plain_routed", "enqueue_ready_routed"):
                for _ in range(WARM_RUNS):
                    await run(conn, self._sql[name], batch, prepare=True)
        self._warmed.add(conn)

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
        fast = all(spec.unique_key is None and not spec.depends_on for spec in specs)
        async with translated_errors():
            if uow is None:
                if fast:
                    return await self._enqueue_fast(specs)
                async with self._connections.tx(pipeline=True) as conn:
                    return await self.insert(conn, specs)
            conn = self._connections.owned(uow, self._owner)
            if fast:
                now = self._clock.now()
                async with conn.pipeline():
                    cur = await self._send_enqueue(
                        conn, specs, now, notify=True, wake=set(), restore=True
                    )
                return await self._records(cur, specs, now)
            # No savepoint: validation ran above, and a unique conflict gives back the keys
            # it claimed before raising, so the caller's transaction stays usable.
            return await self.insert(conn, specs)

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        for spec in specs:
            validate_spec(spec)
        inserted: list[JobRecord] = []
        async with translated_errors(), self._connections.tx() as conn:
            for spec in specs:
                try:
                    async with conn.transaction():
                        inserted.extend(await self.insert(conn, [spec]))
                except UniqueConflict:
                    continue
        return inserted
