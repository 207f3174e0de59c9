"""The canonical Postgres engine: mutable job rows and ``FOR UPDATE SKIP LOCKED`` claims."""

from __future__ import annotations

from awa.adapters._pg.leader import PostgresLeaderLock
from awa.adapters._pg.notifier import PostgresNotifier, PostgresSubscription
from awa.adapters.postgres_canonical.admin import AdminOps
from awa.adapters.postgres_canonical.batch import BatchOps
from awa.adapters.postgres_canonical.dlq import DlqOps
from awa.adapters.postgres_canonical.maintenance import MaintenanceOps
from awa.adapters.postgres_canonical.worker import WorkerOps


class CanonicalEngine(
    WorkerOps,
    MaintenanceOps,
    AdminOps,
    DlqOps,
    BatchOps,
):
    """:class:`awa.ports.StorageEngine` on the canonical tables.

    Build it with ``await CanonicalEngine.open(url, clock=..., backoff=...)`` (checks the
    schema is migrated) or around an existing pool with ``CanonicalEngine(pool, ...)``.
    It is also a :class:`awa.ports.Notifier` and hands out leader-lock candidates, both on
    dedicated connections to the pool's database.
    """

    async def subscribe(self, channels: list[str]) -> PostgresSubscription:
        """LISTEN on ``channels`` over a dedicated connection."""
        return await PostgresNotifier(self._conninfo(), clock=self._clock).subscribe(channels)

    def leader_lock(self) -> PostgresLeaderLock:
        """A new candidate for the cluster's maintenance leadership."""
        return PostgresLeaderLock(self._conninfo())
