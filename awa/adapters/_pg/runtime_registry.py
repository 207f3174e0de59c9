"""``awa.ports.RuntimeRegistry`` on ``awa.runtime_instances``.

Each worker runtime upserts one row keyed by its random UUID; ``last_seen_at`` is stamped
with the database clock so "live" means the same thing to every reader, whatever the
runtimes' clocks say. The storage capability and transition role are properties of how
the runtime was started, so they are fixed per registry rather than carried in snapshots.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot

log = logging.getLogger("awa.adapters.runtime_registry")

STORAGE_CAPABILITIES = ("canonical", "canonical_drain_only", "queue_storage")
TRANSITION_ROLES = ("auto", "canonical_drain", "queue_storage_target")

#: Rows not refreshed for this long belong to runtimes that died without saying goodbye.
#: It is far beyond the "live" window (max(3 x snapshot interval, 30 s)), so garbage
#: collection never removes a runtime that readers could still consider live.
STALE_ROW_HORIZON = timedelta(minutes=10)

_UPSERT = b"""
INSERT INTO awa.runtime_instances AS r (
    id, hostname, pid, version, queues, storage_capability, transition_role, leader,
    healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
    shutting_down, snapshot_interval_ms, started_at, last_seen_at,
    queue_descriptor_hashes, job_kind_descriptor_hashes
) VALUES (
    %(id)s, %(hostname)s, %(pid)s, %(version)s, %(queues)s, %(storage_capability)s,
    %(transition_role)s, %(leader)s, %(healthy)s, %(postgres_connected)s,
    %(poll_loop_alive)s, %(heartbeat_alive)s, %(maintenance_alive)s, %(shutting_down)s,
    %(snapshot_interval_ms)s, %(started_at)s, now(), %(queue_descriptor_hashes)s,
    %(job_kind_descriptor_hashes)s
)
ON CONFLICT (id) DO UPDATE SET
    hostname = EXCLUDED.hostname,
    pid = EXCLUDED.pid,
    version = EXCLUDED.version,
    queues = EXCLUDED.queues,
    storage_capability = EXCLUDED.storage_capability,
    transition_role = EXCLUDED.transition_role,
    leader = EXCLUDED.leader,
    healthy = EXCLUDED.healthy,
    postgres_connected = EXCLUDED.postgres_connected,
    poll_loop_alive = EXCLUDED.poll_loop_alive,
    heartbeat_alive = EXCLUDED.heartbeat_alive,
    maintenance_alive = EXCLUDED.maintenance_alive,
    shutting_down = EXCLUDED.shutting_down,
    snapshot_interval_ms = EXCLUDED.snapshot_interval_ms,
    started_at = EXCLUDED.started_at,
    last_seen_at = now(),
    queue_descriptor_hashes = EXCLUDED.queue_descriptor_hashes,
    job_kind_descriptor_hashes = EXCLUDED.job_kind_descriptor_hashes
"""

_GC = b"""
DELETE FROM awa.runtime_instances
WHERE last_seen_at < now() - %(horizon)s::interval AND id <> %(id)s
"""

_LIST = b"""
SELECT * FROM awa.runtime_instances
WHERE %(live_within)s::interval IS NULL OR last_seen_at >= now() - %(live_within)s::interval
ORDER BY last_seen_at DESC, id
"""

_DELETE = b"DELETE FROM awa.runtime_instances WHERE id = %(id)s RETURNING id"


def queues_json(queues: tuple[QueueSnapshot, ...]) -> list[dict[str, Any]]:
    """The ``queues`` column: one object per configured queue with its capacity config."""
    return [
        {
            "name": q.name,
            "in_flight": q.in_flight,
            "max_workers": q.max_workers,
            "min_workers": q.min_workers,
            "weight": q.weight,
            "rate_limit": (
                None
                if q.rate_limit is None
                else {"max_rate": q.rate_limit[0], "burst": q.rate_limit[1]}
            ),
            **{name: getattr(q, name) for name in _QUEUE_CONFIG_FIELDS},
        }
        for q in queues
    ]


#: Queue-config fields a snapshot carries beyond capacity (absent in older rows).
_QUEUE_CONFIG_FIELDS = (
    "mode",
    "global_max_workers",
    "poll_interval_ms",
    "deadline_ms",
    "aging_interval_ms",
    "claimers",
    "claim_batch_size",
    "overflow_held",
    "max_running_per_key",
    "global_rate_per_second",
    "global_rate_burst",
    "global_rate_per_key_per_second",
    "global_rate_per_key_burst",
)


def _queue_from_json(raw: dict[str, Any]) -> QueueSnapshot:
    limit = raw.get("rate_limit")
    return QueueSnapshot(
        name=str(raw["name"]),
        in_flight=int(raw.get("in_flight") or 0),
        max_workers=raw.get("max_workers"),
        min_workers=raw.get("min_workers"),
        weight=raw.get("weight"),
        rate_limit=None if not limit else (float(limit["max_rate"]), int(limit["burst"])),
        **{name: raw.get(name) for name in _QUEUE_CONFIG_FIELDS},
    )


def _snapshot_from_row(row: dict[str, Any]) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        id=str(row["id"]),
        hostname=row["hostname"] or "",
        pid=int(row["pid"] or 0),
        version=row["version"],
        started_at=row["started_at"],
        last_seen_at=row["last_seen_at"],
        leader=row["leader"],
        healthy=row["healthy"],
        postgres_connected=row["postgres_connected"],
        poll_loop_alive=row["poll_loop_alive"],
        heartbeat_alive=row["heartbeat_alive"],
        shutting_down=row["shutting_down"],
        snapshot_interval_ms=int(row["snapshot_interval_ms"]),
        queues=tuple(_queue_from_json(q) for q in row["queues"] or ()),
        maintenance_alive=row["maintenance_alive"],
        storage_capability=row["storage_capability"],
        transition_role=row["transition_role"],
        queue_descriptor_hashes=dict(row.get("queue_descriptor_hashes") or {}),
        job_kind_descriptor_hashes=dict(row.get("job_kind_descriptor_hashes") or {}),
    )


class PostgresRuntimeRegistry:
    """Runtime snapshots as rows of ``awa.runtime_instances``, written through ``pool``.

    :meth:`close` deletes the rows this registry wrote, so a runtime that shuts down
    cleanly stops counting as live at once instead of after the liveness window.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[DictConnection],
        *,
        storage_capability: str = "canonical",
        transition_role: str = "auto",
        stale_horizon: timedelta = STALE_ROW_HORIZON,
    ) -> None:
        if storage_capability not in STORAGE_CAPABILITIES:
            raise ValueError(
                f"storage_capability must be one of {STORAGE_CAPABILITIES}, "
                f"got {storage_capability!r}"
            )
        if transition_role not in TRANSITION_ROLES:
            raise ValueError(
                f"transition_role must be one of {TRANSITION_ROLES}, got {transition_role!r}"
            )
        self._pool = pool
        self.storage_capability = storage_capability
        self.transition_role = transition_role
        self._stale_horizon = stale_horizon
        self._written: set[str] = set()

    async def upsert_runtime(self, snapshot: RuntimeSnapshot) -> None:
        """Write the snapshot (stamping ``last_seen_at`` with the database clock) and
        forget rows of runtimes that have been silent for longer than the GC horizon."""
        params = {
            "id": snapshot.id,
            "hostname": snapshot.hostname,
            "pid": snapshot.pid,
            "version": snapshot.version,
            "queues": Jsonb(queues_json(snapshot.queues)),
            "storage_capability": self.storage_capability,
            "transition_role": self.transition_role,
            "leader": snapshot.leader,
            "healthy": snapshot.healthy,
            "postgres_connected": snapshot.postgres_connected,
            "poll_loop_alive": snapshot.poll_loop_alive,
            "heartbeat_alive": snapshot.heartbeat_alive,
            "maintenance_alive": snapshot.maintenance_alive,
            "shutting_down": snapshot.shutting_down,
            "snapshot_interval_ms": snapshot.snapshot_interval_ms,
            "started_at": snapshot.started_at,
            "queue_descriptor_hashes": Jsonb(snapshot.queue_descriptor_hashes),
            "job_kind_descriptor_hashes": Jsonb(snapshot.job_kind_descriptor_hashes),
        }
        async with translated_errors(), self._pool.connection() as conn:
            await conn.execute(_UPSERT, params)
            await conn.execute(_GC, {"horizon": self._stale_horizon, "id": snapshot.id})
        self._written.add(snapshot.id)

    async def list_runtimes(self, *, live_within: timedelta | None = None) -> list[RuntimeSnapshot]:
        """Known runtimes, most recently seen first (optionally only the live ones)."""
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_LIST, {"live_within": live_within})
            rows = await cur.fetchall()
        return [_snapshot_from_row(dict(r)) for r in rows]

    async def remove_runtime(self, runtime_id: str) -> bool:
        """Delete the runtime's row; returns whether it existed."""
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_DELETE, {"id": runtime_id})
            row = await cur.fetchone()
        self._written.discard(runtime_id)
        return row is not None

    async def close(self) -> None:
        """Remove every row this registry wrote (the runtime is going away)."""
        for runtime_id in sorted(self._written):
            try:
                await self.remove_runtime(runtime_id)
            except Exception:
                # Shutdown must not fail over bookkeeping; the row ages out via GC instead.
                log.warning("removing runtime row %s failed", runtime_id, exc_info=True)
