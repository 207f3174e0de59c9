"""Long transactions against queue storage (ADR 0006, "Long transactions").

A session that read the ring holds a lock on every partition until it ends, so prune
cannot swap the slot it targets; a session that merely holds an xid or a snapshot keeps
VACUUM from removing the dead versions of the control rows. Neither stops claims or
completions. The leader says why it is waiting (a WARNING naming the blocking pid and
its ``xact_start``, and a row in ``awa.ring_maintenance`` that ``awa storage status``
prints) and, once the horizon has moved past, compacts the control tables that grew.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from psycopg import errors as pg_errors
from psycopg import sql

from awa.adapters._pg.pool import DictConnection, is_pooled
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.statements import Statements, run, slot_table
from awa.ports.clock import Clock

log = logging.getLogger("awa.adapters.postgres_queue_storage")

#: Control tables: updated in place on the hot path, so an old snapshot bloats them.
CONTROL_TABLES = (
    "lanes",
    "claim_heads",
    "queue_counts",
    "completions",
    "ring_state",
    "queue_prune_stats",
)
#: After a long transaction, a control table is rewritten when it is at least this much
#: larger than when the transaction was first seen (and at least twice that size).
COMPACT_GROWTH_BYTES = 64 << 10

#: Runs one of the compaction's VACUUM statements on a control table.
Vacuum = Callable[[str, str], Awaitable[None]]
#: A blocking transaction is named again at most this often.
WARN_EVERY = 60.0


class LongTransactions:
    """Diagnosis and recovery around long transactions, for the maintenance leader."""

    def __init__(self, connections: Connections, statements: Statements, clock: Clock) -> None:
        self._connections = connections
        self._sql = statements
        self._schema = statements.schema
        self._clock = clock
        #: A lock holder or horizon holder is reported once its transaction is this old.
        self.long_transaction_after = timedelta(seconds=5)
        #: How often prune also looks at the xmin horizon.
        self.horizon_check_every = 10.0
        #: See COMPACT_GROWTH_BYTES.
        self.compact_growth_bytes = COMPACT_GROWTH_BYTES
        self._sizes_before: dict[str, int] | None = None
        self._warned: dict[tuple[str, int], float] = {}
        self._recorded: dict[str, tuple[str, int | None]] = {}
        self._horizon_checked = -math.inf
        self._horizon_held = False

    async def _long_rows(self, conn: DictConnection, name: str, **params: Any) -> list[Any]:
        return await self._sql.rows(conn, self._sql[name], params)

    def _should_warn(self, concern: str, pid: int) -> bool:
        warned = self._warned
        now = self._clock.monotonic()
        if now - warned.get((concern, pid), -math.inf) < WARN_EVERY:
            return False
        warned[(concern, pid)] = now
        return True

    async def record(
        self,
        concern: str,
        outcome: str,
        holder: dict[str, Any] | None = None,
        detail: str | None = None,
    ) -> None:
        """Store the outcome for ``awa storage status`` when it changed (this process
        remembers what it wrote, so a steady state costs nothing)."""
        recorded = self._recorded
        pid = None if holder is None else int(holder["pid"])
        if recorded.get(concern) == (outcome, pid):
            return
        async with self._connections.conn() as conn:
            try:
                await self._long_rows(
                    conn,
                    "record_outcome",
                    schema=self._schema,
                    concern=concern,
                    outcome=outcome,
                    pid=pid,
                    xact_start=None if holder is None else holder["xact_start"],
                    detail=detail,
                )
            except pg_errors.UndefinedTable:
                return  # a database migrated before 0395: nothing to show it in
        recorded[concern] = (outcome, pid)

    async def explain_blocked(self, slot: int, tables: tuple[str, ...]) -> None:
        """Prune could not lock ``slot``: name the long transactions holding it."""
        relations = [sql.Identifier(self._schema, t).as_string() for t in tables] + [
            slot_table(self._schema, t, slot).as_string() for t in tables
        ]
        async with self._connections.conn() as conn:
            holders = await self._long_rows(conn, "ring_lock_holders", relations=relations)
        now = self._clock.now()
        long = [
            h
            for h in holders
            if h["xact_start"] is not None and now - h["xact_start"] >= self.long_transaction_after
        ]
        if not long:
            await self.record("queue", "blocked")
            return
        oldest = long[0]
        detail = (
            f"slot {slot} is locked by pid {oldest['pid']} (state {oldest['state']}, "
            f"application {oldest['application_name']!r}, transaction started "
            f"{oldest['xact_start'].isoformat()}): {oldest['query']}"
        )
        if self._should_warn("lock", int(oldest["pid"])):
            log.warning(
                "queue storage in %s: prune is waiting for a long transaction: %s. Storage "
                "grows until it ends (commit or roll it back, or end it with "
                "pg_terminate_backend(%s)); jobs keep running meanwhile",
                self._schema,
                detail,
                oldest["pid"],
            )
        await self.record("queue", "blocked_by_transaction", oldest, detail)

    async def watch_horizon(self) -> None:
        """Every ``horizon_check_every`` seconds: warn while an old transaction holds the
        xmin horizon; once it is gone, compact the control tables it let grow."""
        now = self._clock.monotonic()
        if now - self._horizon_checked < self.horizon_check_every:
            return
        self._horizon_checked = now
        async with self._connections.conn() as conn:
            (holder, *_) = await self._long_rows(
                conn,
                "horizon_holder",
                before=self._clock.now() - self.long_transaction_after,
            ) or [None]
        if holder is not None:
            detail = (
                f"pid {holder['pid']} (state {holder['state']}, application "
                f"{holder['application_name']!r}, transaction started "
                f"{holder['xact_start'].isoformat()}, xid {holder['xid']}, xmin "
                f"{holder['xmin']}) keeps VACUUM from removing dead control rows: "
                f"{holder['query']}"
            )
            if self._should_warn("horizon", int(holder["pid"])):
                log.warning(
                    "queue storage in %s: an old transaction holds the xmin horizon: %s. "
                    "Control tables grow until it ends; they are compacted after",
                    self._schema,
                    detail,
                )
            if not self._horizon_held:
                self._sizes_before = await self._control_sizes()
            self._horizon_held = True
            await self.record("horizon", "held", holder, detail)
            return
        if self._horizon_held:
            # set again by the compaction when a table's lock was not granted
            self._horizon_held = False
            compacted = await self.compact_control_tables()
            await self.record(
                "horizon",
                "released",
                detail="compacted: " + (", ".join(compacted) if compacted else "nothing"),
            )

    async def _control_sizes(self) -> dict[str, int]:
        async with self._connections.conn() as conn:
            rows = await self._long_rows(
                conn,
                "control_sizes",
                schema=self._sql.quoted_schema,
                tables=list(CONTROL_TABLES),
            )
        return {str(r["relname"]): int(r["bytes"]) for r in rows}

    async def compact_control_tables(self) -> list[str]:
        """VACUUM the control tables and rewrite those that grew (at least twice, and
        ``compact_growth_bytes``, larger than when the long transaction was first seen;
        when none was seen, those larger than ``compact_growth_bytes``) with ``VACUUM
        (FULL)`` of a table of a few hundred rows; every lock is asked for under a short
        ``lock_timeout``, so a claim waits at most that long). Returns the rewritten
        tables; one whose lock was not granted is left for the next call."""
        rewritten = []
        async with self._connections.conn() as conn, self._lock_wait(conn) as vacuum:
            for table in CONTROL_TABLES:
                # plain VACUUM waits for an autovacuum of the same table otherwise
                with contextlib.suppress(pg_errors.LockNotAvailable):
                    await vacuum("vacuum_control_table", table)
            sizes = await self._long_rows(
                conn,
                "control_sizes",
                schema=self._sql.quoted_schema,
                tables=list(CONTROL_TABLES),
            )
            for row in sizes:
                before = (self._sizes_before or {}).get(str(row["relname"]), 0)
                size = int(row["bytes"])
                if size < 2 * before or size - before < self.compact_growth_bytes:
                    continue
                try:
                    await vacuum("vacuum_full_control_table", str(row["relname"]))
                    rewritten.append(str(row["relname"]))
                except pg_errors.LockNotAvailable:
                    log.info(
                        "queue storage in %s: %s is busy; compacting it later",
                        self._schema,
                        row["relname"],
                    )
                    self._horizon_held = True
        return rewritten

    @contextlib.asynccontextmanager
    async def _lock_wait(self, conn: DictConnection) -> AsyncIterator[Vacuum]:
        """How the compaction's VACUUMs ask for their locks, which a claim queues behind:
        on a direct session under a short ``lock_timeout`` (set for the session and reset
        after: VACUUM runs outside any transaction, so ``SET LOCAL`` cannot bound it).
        Through a transaction-mode pooler the session is not ours to set, so each VACUUM
        skips a table it cannot lock at once instead (``SKIP_LOCKED``; the server's
        warning, SQLSTATE 55P03, raises ``LockNotAvailable`` as the timeout does)."""
        if not is_pooled(conn):

            async def bounded(statement: str, table: str) -> None:
                await run(conn, self._vacuum(statement, table))

            await run(conn, self._sql["compact_lock_timeout"])
            try:
                yield bounded
            finally:
                await run(conn, self._sql["reset_lock_timeout"])
            return
        skipped: list[str] = []

        def on_notice(diag: pg_errors.Diagnostic) -> None:
            if diag.sqlstate == pg_errors.LockNotAvailable.sqlstate:
                skipped.append(diag.message_primary or "lock not available")

        async def skipping(statement: str, table: str) -> None:
            skipped.clear()
            await run(conn, self._vacuum(f"{statement}_skip_locked", table))
            if skipped:
                raise pg_errors.LockNotAvailable(skipped[0])

        conn.add_notice_handler(on_notice)
        try:
            yield skipping
        finally:
            conn.remove_notice_handler(on_notice)

    def _vacuum(self, statement: str, table: str) -> bytes:
        return self._sql.render(statement, table=sql.Identifier(self._schema, table))
