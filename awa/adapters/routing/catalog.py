"""Cron schedules, queue overrides, descriptors and queue samples through the routing
engine.

Both engines reach the same catalogs (on Postgres: ``awa.cron_jobs``, the override
columns of ``awa.queue_meta``, the descriptor tables and ``awa.queue_samples``), so the
routing engine asks the
canonical one. A cron fire enqueues where the transition sends producers: the store routes
it (``awa.insert_job_compat`` on Postgres).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from awa.adapters.routing.base import C, RoutingBase
from awa.domain.admin_views import QueueSample
from awa.domain.cron import CronJob, CronSchedule
from awa.domain.descriptors import Catalog, StoredDescriptor
from awa.domain.job import JobRecord
from awa.domain.overrides import QueueOverrides
from awa.ports.descriptors import DeclaredDescriptor


class CatalogOps(RoutingBase[C]):
    """:class:`~awa.ports.cron.CronStore`, :class:`~awa.ports.overrides.QueueOverrideStore`
    :class:`~awa.ports.descriptors.DescriptorStore` and
    :class:`~awa.ports.samples.QueueSampleStore`, delegated."""

    # ---------------------------------------------------------------- cron
    async def upsert_cron_jobs(self, schedules: Sequence[CronSchedule]) -> None:
        await self._canonical.upsert_cron_jobs(schedules)

    async def list_cron_jobs(self) -> list[CronJob]:
        return await self._canonical.list_cron_jobs()

    async def get_cron_job(self, name: str) -> CronJob | None:
        return await self._canonical.get_cron_job(name)

    async def delete_cron_job(self, name: str) -> bool:
        return await self._canonical.delete_cron_job(name)

    async def pause_cron_job(self, name: str, *, paused_by: str | None = None) -> bool:
        return await self._canonical.pause_cron_job(name, paused_by=paused_by)

    async def resume_cron_job(self, name: str) -> bool:
        return await self._canonical.resume_cron_job(name)

    async def fire_cron_job(
        self, name: str, *, fire_at: datetime, previous: datetime | None
    ) -> JobRecord | None:
        return await self._canonical.fire_cron_job(name, fire_at=fire_at, previous=previous)

    async def trigger_cron_job(self, name: str) -> JobRecord | None:
        return await self._canonical.trigger_cron_job(name)

    # ---------------------------------------------------------------- queue overrides
    async def get_queue_overrides(self, queue: str) -> QueueOverrides | None:
        return await self._canonical.get_queue_overrides(queue)

    async def set_queue_overrides(self, queue: str, overrides: QueueOverrides) -> None:
        await self._canonical.set_queue_overrides(queue, overrides)

    async def clear_queue_overrides(self, queue: str) -> bool:
        return await self._canonical.clear_queue_overrides(queue)

    async def list_queue_overrides(self) -> dict[str, QueueOverrides]:
        return await self._canonical.list_queue_overrides()

    # ---------------------------------------------------------------- descriptors
    async def sync_descriptors(
        self,
        queues: Sequence[DeclaredDescriptor],
        kinds: Sequence[DeclaredDescriptor],
        *,
        sync_interval_ms: int,
    ) -> None:
        await self._canonical.sync_descriptors(queues, kinds, sync_interval_ms=sync_interval_ms)

    async def list_descriptors(self, catalog: Catalog) -> list[StoredDescriptor]:
        return await self._canonical.list_descriptors(catalog)

    async def delete_descriptors_unseen_since(self, cutoff: datetime) -> int:
        return await self._canonical.delete_descriptors_unseen_since(cutoff)

    # ---------------------------------------------------------------- queue samples
    async def record_queue_samples(self, samples: Sequence[QueueSample]) -> None:
        await self._canonical.record_queue_samples(samples)

    async def queue_samples(self, *, since: datetime) -> list[QueueSample]:
        return await self._canonical.queue_samples(since=since)

    async def prune_queue_samples(self, *, before: datetime) -> int:
        return await self._canonical.prune_queue_samples(before=before)
