"""Live queue overrides on the client (``awa queue overrides set|clear|show``)."""

from __future__ import annotations

from typing import Any

from awa.domain.overrides import QueueOverrides, validate_overrides
from awa.domain.validation import validate_queue
from awa.entrypoints.client_core import ClientCore
from awa.ports.overrides import QueueOverrideStore


class OverridesMixin(ClientCore):
    """Per-queue overrides that running dispatchers apply within their refresh interval
    (10 s, ``AWA_OVERRIDE_REFRESH_MS``), without a restart."""

    async def _override_store(self) -> QueueOverrideStore:
        return (await self._control()).overrides

    async def set_queue_overrides(
        self,
        queue: str,
        *,
        poll_interval_ms: int | None = None,
        claim_batch_size: int | None = None,
        rate_limit: float | None = None,
        rate_limit_burst: int | None = None,
        deadline_ms: int | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: float | None = None,
        global_rate_burst: int | None = None,
        global_rate_limit_per_key: float | None = None,
        global_rate_burst_per_key: int | None = None,
    ) -> dict[str, Any]:
        """Replace the queue's whole override state (an argument left ``None`` clears
        that override) and return it. A rate-limit override only retunes a queue started
        with a rate limit; a deadline override only retunes a non-zero deadline; a
        ``max_running_per_key`` override sets the per-key limit of every runtime serving
        the queue (ADR 0029); so do ``global_rate_limit`` (jobs per second for the whole
        fleet) with ``global_rate_burst``, and their per-concurrency-key twins (a rate
        without a burst keeps the started burst, or 1 when the queue has none)."""
        validate_queue(queue)
        overrides = validate_overrides(
            QueueOverrides(
                poll_interval_ms=poll_interval_ms,
                claim_batch_size=claim_batch_size,
                rate_limit_per_second=rate_limit,
                rate_limit_burst=rate_limit_burst,
                deadline_ms=deadline_ms,
                max_running_per_key=max_running_per_key,
                global_rate_per_second=global_rate_limit,
                global_rate_burst=global_rate_burst,
                global_rate_per_key_per_second=global_rate_limit_per_key,
                global_rate_per_key_burst=global_rate_burst_per_key,
            )
        )
        await (await self._override_store()).set_queue_overrides(queue, overrides)
        return overrides.as_dict()

    async def clear_queue_overrides(self, queue: str) -> bool:
        """Clear every override of ``queue``; ``False`` if it had none."""
        return await (await self._override_store()).clear_queue_overrides(queue)

    async def queue_overrides(self, queue: str | None = None) -> dict[str, dict[str, Any]]:
        """Overrides by queue: every queue that has any, or just ``queue`` (empty when it
        has none)."""
        store = await self._override_store()
        if queue is not None:
            found = await store.get_queue_overrides(queue)
            return {} if found is None else {queue: found.as_dict()}
        return {name: o.as_dict() for name, o in (await store.list_queue_overrides()).items()}
