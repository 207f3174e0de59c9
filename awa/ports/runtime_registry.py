"""Where worker runtimes publish who they are (``awa.runtime_instances``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

import attrs


@attrs.frozen
class QueueSnapshot:
    """One configured queue of a runtime, as published in its snapshot."""

    name: str
    in_flight: int
    max_workers: int | None
    min_workers: int | None
    weight: int | None
    rate_limit: tuple[float, int] | None = None
    #: the rest of the queue's configuration, as the admin API's ``config`` shows it;
    #: ``None`` where a snapshot written by an older runtime did not carry it
    mode: str | None = None  # "hard_reserved" or "weighted"
    global_max_workers: int | None = None
    poll_interval_ms: int | None = None
    deadline_ms: int | None = None
    aging_interval_ms: int | None = None
    claimers: int | None = None
    claim_batch_size: int | None = None
    overflow_held: int | None = None
    #: the fleet-wide flow-control limits the runtime's queue config sets (before
    #: operators' overrides), so operator surfaces can show the limit in force
    max_running_per_key: int | None = None
    global_rate_per_second: float | None = None
    global_rate_burst: int | None = None
    global_rate_per_key_per_second: float | None = None
    global_rate_per_key_burst: int | None = None


@attrs.frozen
class RuntimeSnapshot:
    """A worker runtime's self-description, refreshed periodically.

    ``id`` is a random UUID per runtime instance; ``last_seen_at`` is when the snapshot
    was taken (adapters may stamp their own clock instead).
    """

    id: str
    hostname: str
    pid: int
    version: str
    started_at: datetime
    last_seen_at: datetime
    leader: bool
    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    shutting_down: bool
    snapshot_interval_ms: int
    queues: tuple[QueueSnapshot, ...] = ()
    maintenance_alive: bool = True
    #: how the runtime was started (``awa.runtime_instances`` columns); registries that
    #: fix them per registry fill them in on read
    storage_capability: str | None = None
    transition_role: str | None = None
    #: hash of each descriptor this runtime declares, by queue / by kind
    queue_descriptor_hashes: dict[str, str] = attrs.field(factory=dict)
    job_kind_descriptor_hashes: dict[str, str] = attrs.field(factory=dict)


class RuntimeRegistry(Protocol):
    async def upsert_runtime(self, snapshot: RuntimeSnapshot) -> None:
        """Insert the snapshot, or replace the previous one with the same ``id``."""
        ...

    async def list_runtimes(self, *, live_within: timedelta | None = None) -> list[RuntimeSnapshot]:
        """Known runtimes, most recently seen first. With ``live_within``, only those whose
        ``last_seen_at`` is no older than that (measured on the registry's clock)."""
        ...

    async def remove_runtime(self, runtime_id: str) -> bool:
        """Forget a runtime; returns whether it was known."""
        ...
