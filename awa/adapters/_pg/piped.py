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

#: How long a cancelled or failed transaction waits for the server to settle it (the
#: pipeline's answers, then ``ROLLBACK``), shielded from the cancellation; past it the
#: connection is closed.
SETTLE_LIMIT = 5.0


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
    pipeline = conn.pipeline()
    await pipeline.__aenter__()
    try:
        try:
            await conn.execute(b"BEGIN")
            yield
            await conn.execute(b"COMMIT")
        except BaseException as exc:
            # Leave the pipeline even when the block was cancelled: its exit reads what
            # the server has answered so far. Cancelled in the middle of that, psycopg
            # closed the connection (the pool opened a new session for the next caller)
            # and left its exit unfinished, which printed "Exception ignored in
            # BasePipeline._exit_gen" when collected.
            with anyio.move_on_after(SETTLE_LIMIT, shield=True):
                await pipeline.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        await pipeline.__aexit__(None, None, None)
        committed = True
    finally:
        if not committed and not conn.closed:
            with anyio.move_on_after(SETTLE_LIMIT, shield=True) as settle:
                try:
                    await conn.execute(b"ROLLBACK")
                except psycopg.Error:
                    # The pool checks (and discards) a connection left in a transaction
                    # or mid-request when it comes back.
                    log.debug("rolling back a piped transaction failed", exc_info=True)
            if settle.cancelled_caught:
                # No answer from the server: its session's state is unknown.
                await conn.close()
