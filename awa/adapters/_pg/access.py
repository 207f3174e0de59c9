"""Can this database connection write? (Replicas, read-only sessions, read-only roles.)"""

from __future__ import annotations

import attrs

from awa.adapters._pg.pool import connect
from awa.adapters._pg.sql import load_queries


@attrs.frozen
class WriteAccess:
    """The answer of :func:`probe_write_access`; ``reason`` says why writes are refused."""

    writable: bool
    reason: str | None = None


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
        return WriteAccess(False, "the database is a read-only replica (in recovery)")
    if row["read_only_session"]:
        return WriteAccess(False, "transactions are read-only (default_transaction_read_only)")
    missing = list(row["not_writable"])
    if missing:
        return WriteAccess(
            False, f"the role cannot insert, update and delete in {', '.join(missing)}"
        )
    return WriteAccess(True)
