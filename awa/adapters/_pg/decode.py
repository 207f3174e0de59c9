"""Fetching result rows when one of them holds a value Python cannot decode.

A ``timestamptz`` before year 1 or after year 9999 (``-infinity`` included) is valid in
Postgres but has no ``datetime``: psycopg raises ``DataError`` while converting the row,
and the whole ``fetchall`` fails with it. One such job would stop promotion, the claims
of its queue and every listing for everyone. The check constraints of migration 0397
keep new rows in range; rows written before it (or by hand into internal tables) are
skipped here, one at a time, and logged with their id so an operator can repair them.

The fast path is the plain ``fetchall``: rows are only decoded one by one after it failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncCursor

log = logging.getLogger("awa.adapters.decode")

Row = TypeVar("Row")

#: Columns naming the job a row belongs to, in the order they are looked for.
_ID_COLUMNS = ("id", "job_id")
#: When each (database, job id) was last reported at WARNING by this process: a row met
#: on every maintenance tick is reported again every ``_REPEAT_SECONDS``, at DEBUG between.
_reported: dict[tuple[str, int | None], float] = {}
_REPEAT_SECONDS = 600.0
_REPORTED_MAX = 10_000

REPAIR_HINT = (
    "repair it with UPDATE awa.jobs SET run_at = now() WHERE id = {id} "
    "(or delete the job with DELETE FROM awa.jobs WHERE id = {id})"
)


async def fetch_decodable(cur: AsyncCursor[Row]) -> list[Row]:
    """Every row of ``cur``'s current result that can be decoded; the others are skipped
    and logged (WARNING, naming the job id and the cause)."""
    try:
        return await cur.fetchall()
    except psycopg.DataError:
        pass
    rows: list[Row] = []
    total = _row_count(cur)
    while (cur.rownumber or 0) < total:
        position = cur.rownumber or 0
        try:
            row = await cur.fetchone()
        except psycopg.DataError as exc:
            report_undecodable(cur.connection.info.dbname, _job_id(cur, position), exc)
            if position + 1 >= total:
                break
            await cur.scroll(position + 1, mode="absolute")
            continue
        if row is None:
            break
        rows.append(row)
    return rows


def report_undecodable(database: str, job_id: int | None, exc: BaseException) -> None:
    """Log that the row of ``job_id`` was skipped because ``exc`` stopped its decoding."""
    now = time.monotonic()
    key = (database, job_id)
    last = _reported.get(key)
    loud = last is None or now - last >= _REPEAT_SECONDS
    if loud:
        if len(_reported) >= _REPORTED_MAX:
            _reported.clear()
        _reported[key] = now
    hint = REPAIR_HINT.format(id=job_id) if job_id is not None else "repair the row in SQL"
    log.log(
        logging.WARNING if loud else logging.DEBUG,
        "job %s: skipped a row that cannot be read (%s); %s",
        job_id if job_id is not None else "(unknown id)",
        exc,
        hint,
    )


def _row_count(cur: AsyncCursor[Any]) -> int:
    result = cur.pgresult
    return 0 if result is None else int(result.ntuples)


def _job_id(cur: AsyncCursor[Any], position: int) -> int | None:
    """The job id of row ``position`` read from the raw result (ids always decode)."""
    result = cur.pgresult
    description: Sequence[Any] | None = cur.description
    if result is None or description is None:
        return None
    names = [column.name for column in description]
    for name in _ID_COLUMNS:
        if name not in names:
            continue
        index = names.index(name)
        raw = result.get_value(position, index)
        if raw is None:
            return None
        data = bytes(raw)
        if result.fformat(index) == 1:  # binary: a big-endian integer
            return int.from_bytes(data, "big", signed=True)
        try:
            return int(data.decode())
        except ValueError:
            return None
    return None
