"""A transaction in pipeline mode, begun and ended by statements queued in the pipeline.

The one rule for every pipelined transaction of the Postgres engines (ADR 0037, "A
pipelined transaction"): ``BEGIN`` goes with the first statement and ``COMMIT`` with the
statements sent after the last read, so a transaction costs as many round trips as its
reads need, plus one for what follows the last of them (none when nothing is read inside
it). psycopg's transaction block inside a pipeline syncs the pipeline when it begins
(``BEGIN`` alone) and twice when it ends: three round trips more.

A transaction block opened inside (``conn.transaction()``) is a savepoint, as in
psycopg's: in pipeline mode libpq reports the connection busy until the server's answer
to a sync says it is in a transaction, never idle."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg

log = logging.getLogger("awa.adapters._pg")


@asynccontextmanager
async def piped_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> AsyncIterator[None]:
    """One transaction on ``conn`` (an autocommit connection outside any transaction) in
    pipeline mode: committed when the block ends, its statements' errors raised as they
    are read (or when the block ends, for those not read inside it). On any exception,
    cancellation included, it is rolled back before the block is left; rows of the
    statements not read inside the block can be read after it."""
    if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise psycopg.ProgrammingError("a piped transaction needs an idle autocommit connection")
    committed = False
    try:
        async with conn.pipeline():
            await conn.execute(b"BEGIN")
            yield
            await conn.execute(b"COMMIT")
        committed = True
    finally:
        if not committed and not conn.closed:
            with anyio.CancelScope(shield=True):
                try:
                    await conn.execute(b"ROLLBACK")
                except psycopg.Error:
                    # The pool checks (and discards) a connection left in a transaction
                    # or mid-request when it comes back.
                    log.debug("rolling back a piped transaction failed", exc_info=True)
