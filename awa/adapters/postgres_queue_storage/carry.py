"""Carry-forward of live rows by prune (ADR 0006, "Carry-forward of live rows").

Prune reclaims a slot whatever it holds: unclaimed ready rows and open attempts are
copied into the current slot (same ids, same lane positions, same bodies) in the prune
transaction, and the lease rows of the carried attempts are re-pointed at the new slot
under prune's lock. The lease ring does the same with the leases of open attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import errors as pg_errors
from psycopg import sql

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.statements import Statements


class LanesBusy(Exception):
    """A step of carry-ahead did not get its lanes' claim heads within its lock timeout."""


class Carry:
    """The carry-forward steps of queue-ring and lease-ring prune, in prune's transaction."""

    def __init__(self, statements: Statements) -> None:
        self._sql = statements

    async def _carry_rows(
        self, conn: DictConnection, name: str, *, slot_k: int | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        statement = self._sql[name] if slot_k is None else self._sql.for_slot(name, slot_k)
        return await self._sql.rows(conn, statement, params)

    async def live_rows(
        self, conn: DictConnection, source: int, current: int
    ) -> tuple[frozenset[int], list[tuple[int, int]]]:
        """Copy the live ready rows and open claims of ``source`` into ``current``;
        returns the carried jobs and ``(job_id, claim_id)`` of the carried open attempts
        (their lease rows are re-pointed under the lock, :meth:`repoint`)."""
        jobs = await self._carry_rows(conn, "carry_ready", slot_k=source, to=current)
        rows = await self._carry_rows(conn, "carry_claims", slot_k=source, to=current)
        carried = frozenset(int(r["job_id"]) for r in jobs)
        return carried, [(int(r["job_id"]), int(r["claim_id"])) for r in rows]

    async def ahead(
        self, conn: DictConnection, source: int, current: int, limit: int
    ) -> int | None:
        """One bounded step of the carry-forward, ahead of prune's swap: when ``source``
        holds more than ``limit`` ready rows nobody ever claimed or tombstoned, move
        ``limit`` of them (lane by lane, in lane order) into ``current`` in this
        transaction and return how many moved; ``None`` when the rest fits in one step
        (prune then copies it with the swap, :meth:`live_rows`).

        A move deletes the row from ``source`` and inserts the same fact into ``current``
        in one statement, under the lanes' claim heads marked retired (the way every
        writer that retires an unclaimed row takes them, ADR 0006 "Retiring unclaimed
        rows"), so no claim or retiring writer can act on the row in between and a claim
        whose snapshot predates the commit leaves those lanes alone. Raises
        :class:`LanesBusy` when the heads are not granted within
        ``carry_ahead_settings``."""
        await self._sql.rows(conn, self._sql["carry_ahead_settings"])
        picked = await self._carry_rows(conn, "carry_ahead_pick", slot_k=source, limit=limit + 1)
        if len(picked) <= limit:
            return None
        batch = picked[:limit]
        lanes = sorted({(r["queue"], int(r["priority"]), int(r["shard"])) for r in batch})
        try:
            await self._sql.exec(
                conn,
                "retire_lanes",
                schema=self._sql.schema,
                queues=[lane[0] for lane in lanes],
                priorities=[lane[1] for lane in lanes],
                shards=[lane[2] for lane in lanes],
            )
        except pg_errors.LockNotAvailable as exc:
            raise LanesBusy() from exc
        moved = await self._carry_rows(
            conn,
            "carry_ahead",
            slot_k=source,
            to=current,
            facts=[int(r["fact_id"]) for r in batch],
        )
        return len(moved)

    def repoint(
        self, carried: Sequence[tuple[int, int]], source: int, current: int
    ) -> sql.SQL | None:
        """The lease re-point of the carried attempts as one literal statement, to run in
        the same round trip as prune's lock (which takes no parameters)."""
        if not carried:
            return None
        params = {
            "ids": [job_id for job_id, _ in carried],
            "claims": [claim_id for _, claim_id in carried],
            "from": source,
            "to": current,
        }
        return sql.SQL(_literal(self._sql.text("repoint_leases"), params))

    async def live_leases(self, conn: DictConnection, source: int, current: int) -> bool:
        """Move the lease rows of open attempts out of lease slot ``source`` into
        ``current``, under their advisory locks taken without waiting. False (nothing
        moved) when a lease writer holds one of those locks: that prune is ``blocked``."""
        live = await self._carry_rows(conn, "live_leases", slot=source)
        if not live:
            return True
        ids = sorted({int(r["job_id"]) for r in live})
        (locked,) = await self._carry_rows(
            conn, "try_lock_leases", schema=self._sql.schema, ids=ids
        )
        if not locked["ok"]:
            return False
        # Read again under the locks: a writer that held one may have moved its row on.
        live = await self._carry_rows(conn, "live_leases", slot=source)
        if live:
            await self._carry_rows(
                conn,
                "carry_leases",
                ids=[int(r["job_id"]) for r in live],
                claims=[int(r["claim_id"]) for r in live],
                **{"from": source, "to": current},
            )
        return True


def _literal(query: str, params: dict[str, Any]) -> str:
    """``query`` with ``params`` (ints and int lists only) written in as literals."""
    rendered: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, list):
            rendered[key] = "'{" + ",".join(str(int(v)) for v in value) + "}'"
        else:
            rendered[key] = str(int(value))
    return query % rendered
