"""Configurations that start but are likely to misbehave, each with the reason and the fix.

The runtime logs these as warnings at start; nothing here refuses a configuration.
"""

from __future__ import annotations

from awa.runtime.config import RuntimeConfig

#: Heartbeat staleness should cover this many heartbeat intervals.
STALENESS_INTERVALS = 3
#: Connections a worker keeps besides claims and completions: one LISTEN connection per
#: queue plus the leader lock, heartbeat and maintenance (the Deployment guide's
#: ``queue_count + 4``).
POOL_HEADROOM = 4


def config_warnings(config: RuntimeConfig, *, max_connections: int | None = None) -> list[str]:
    """Warnings for ``config`` (and the client's pool size when known)."""
    warnings: list[str] = []
    staleness = config.heartbeat_staleness.total_seconds()
    interval = config.heartbeat_interval
    minimum = STALENESS_INTERVALS * interval
    if staleness < minimum:
        warnings.append(
            f"heartbeat_staleness_ms ({staleness * 1000:.0f}) is below "
            f"{STALENESS_INTERVALS}x heartbeat_interval_ms ({interval * 1000:.0f}): one late "
            "heartbeat (a slow database, a paused process) gets healthy jobs rescued and run "
            f"twice; raise heartbeat_staleness_ms to at least {minimum * 1000:.0f}"
        )
    for queue in config.queues:
        deadline = queue.deadline.total_seconds() if queue.deadline is not None else None
        if deadline is not None and 0 < deadline < interval:
            warnings.append(
                f"queue {queue.name}: deadline_duration_ms ({deadline * 1000:.0f}) is shorter "
                f"than heartbeat_interval_ms ({interval * 1000:.0f}); jobs running past the "
                "deadline are rescued even while their worker is healthy: raise the deadline "
                "or give long jobs their own queue"
            )
    needed = len(config.queues) + POOL_HEADROOM
    if max_connections is not None and max_connections < needed:
        warnings.append(
            f"max_connections ({max_connections}) is below queues + {POOL_HEADROOM} "
            f"({needed}): claims, completions and heartbeats will wait for connections; "
            f"create the client with max_connections={needed} or more"
        )
    if config.global_max_workers is not None:
        reserved = sum(q.min_workers or 0 for q in config.queues)
        if reserved >= config.global_max_workers and len(config.queues) > 1:
            warnings.append(
                f"min_workers add up to {reserved}, leaving nothing of global_max_workers "
                f"({config.global_max_workers}) to share by weight: raise global_max_workers "
                "or lower min_workers"
            )
    return warnings
