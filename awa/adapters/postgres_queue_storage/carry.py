"""Carry-forward of live rows by prune (ADR 0006, "Carry-forward of live rows").

Prune reclaims a slot whatever it holds: unclaimed ready rows and open attempts are
copied into the current slot (same ids, same lane positions, same bodies) in the prune
transaction, and the lease rows of the carried attempts are re-pointed at the new slot
under prune's lock. The lease ring does the same with the leases of open attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.sql import load_queries
from awa.adapters.postgres_queue_storage._base import QueueStorageBase

_CARRY: dict[str, str] | None = None


def _statements(quoted_schema: str) -> dict[str, str]:
    global _CARRY
    if _CARRY is None:
        _CARRY = load_queries("awa.adapters.postgres_queue_storage", "carry.sql")
    return {name: text.replace("{s}", quoted_schema) for name, text in _CARRY.items()}


class CarryOps(QueueStorageBase):
    """The carry-forward steps of queue-ring and lease-ring prune."""

    _carry_q: dict[str, str] | None = None

    def _carry_sql(self, name: str) -> str:
        if self._carry_q is None:
            self._carry_q = _statements('"' + self._schema.replace('"', '""') + '"')
        return self._carry_q[name]

    async def _carry_rows(
        self, conn: DictConnection, name: str, *, slot_k: int | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        text = self._carry_sql(name)
        if slot_k is not None:
            quoted = '"' + self._schema.replace('"', '""') + '"'
            for table in ("ready", "claims", "closures", "tombstones"):
                full = "ready_entries" if table == "ready" else table
                text = text.replace(f"{{{table}_k}}", f'{quoted}."{full}_{slot_k}"')
        cur = await conn.execute(text.encode(), params)
        return list(await cur.fetchall())

    async def _carry_live_rows(
        self, conn: DictConnection, source: int, current: int
    ) -> tuple[frozenset[int], list[tuple[int, int]]]:
        """Copy the live ready rows and open claims of ``source`` into ``current``;
        returns the carried jobs and ``(job_id, claim_id)`` of the carried open attempts
        (their lease rows are re-pointed under the lock, :meth:`_repoint_sql`)."""
        jobs = await self._carry_rows(conn, "carry_ready", slot_k=source, to=current)
        rows = await self._carry_rows(conn, "carry_claims", slot_k=source, to=current)
        carried = frozenset(int(r["job_id"]) for r in jobs)
        return carried, [(int(r["job_id"]), int(r["claim_id"])) for r in rows]

    def _repoint_sql(
        self, carried: Sequence[tuple[int, int]], source: int, current: int
    ) -> str | None:
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
        return _literal(self._carry_sql("repoint_leases"), params)

    async def _carry_live_leases(self, conn: DictConnection, source: int, current: int) -> bool:
        """Move the lease rows of open attempts out of lease slot ``source`` into
        ``current``, under their advisory locks taken without waiting. False (nothing
        moved) when a lease writer holds one of those locks: that prune is ``blocked``."""
        live = await self._carry_rows(conn, "live_leases", slot=source)
        if not live:
            return True
        ids = sorted({int(r["job_id"]) for r in live})
        (locked,) = await self._carry_rows(conn, "try_lock_leases", schema=self._schema, ids=ids)
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
