"""Can this database connection write? (Replicas, read-only sessions, read-only roles.)"""

from __future__ import annotations

import datetime as dt

import attrs

from awa.adapters._pg.pool import connect
from awa.adapters._pg.sql import load_queries


@attrs.frozen
class ReplicaLag:
    """How far a hot standby trails its primary, as the standby itself sees it.

    ``pending_bytes`` is WAL received and not yet replayed. ``behind_seconds`` is 0 when
    nothing received waits for replay, else the age of the last replayed transaction's
    commit on the primary (so an idle primary does not read as lag). A standby whose WAL
    receiver is not ``streaming`` has lost its primary; its lag is then unknown and grows.
    """

    pending_bytes: int
    behind_seconds: float | None
    last_replayed_at: dt.datetime | None
    streaming: bool

    def describe(self) -> str:
        if not self.streaming:
            return "not streaming from its primary"
        if self.behind_seconds is None:
            return "no transaction replayed yet"
        return (
            f"{self.behind_seconds:.1f} s behind the primary ({self.pending_bytes} bytes to replay)"
        )


@attrs.frozen
class WriteAccess:
    """The answer of :func:`probe_write_access`; ``reason`` says why writes are refused,
    ``replica`` how far behind its primary a read-only replica is."""

    writable: bool
    reason: str | None = None
    replica: ReplicaLag | None = None


async def probe_write_access(url: str) -> WriteAccess:
    """Open one connection as the configured role and report whether operator mutations
    could succeed: not on a hot standby, not with ``default_transaction_read_only``, and
    only with INSERT, UPDATE and DELETE on every job table the mutations write."""
    conn = await connect(url)
    try:
        cur = await conn.execute(load_queries(__package__, "access.sql")["write_access"].encode())
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    if row["in_recovery"]:
        pending = int(row["replay_pending_bytes"] or 0)
        age = row["last_replayed_age_seconds"]
        lag = ReplicaLag(
            pending_bytes=pending,
            behind_seconds=None if age is None else (0.0 if pending == 0 else max(0.0, age)),
            last_replayed_at=row["last_replayed_at"],
            streaming=bool(row["streaming"]),
        )
        return WriteAccess(False, "the database is a read-only replica (in recovery)", lag)
    if row["read_only_session"]:
        return WriteAccess(False, "transactions are read-only (default_transaction_read_only)")
    missing = list(row["not_writable"])
    if missing:
        return WriteAccess(
            False, f"the role cannot insert, update and delete in {', '.join(missing)}"
        )
    return WriteAccess(True)
