"""The cluster-wide gauges, read by the maintenance leader on an interval (one cheap read
per cluster rather than one per worker): ``awa.queue.depth``, ``awa.queue.lag``,
``awa.job.dlq_depth`` and, on an engine that follows the storage transition, the
``awa.storage.*`` family.

Depth and lag come from ``queue_depths()``, which never counts finished jobs: on queue
storage, available jobs are the lanes' head-cursor differences and the other states the
folded counters. A queue that had jobs keeps reporting (zeros) after it empties, so its
series ends at 0 rather than at its last backlog. Only the leader reports these, so
summing over workers does not count a queue twice.
"""

from __future__ import annotations

from collections.abc import Callable

from awa.domain.admin_views import DEPTH_STATES
from awa.domain.transition import StorageCapability, TransitionObservation, observation_report
from awa.ports.clock import Clock
from awa.ports.storage import StorageEngine, TransitionObserver
from awa.runtime.metrics import (
    ATTR_QUEUE,
    ATTR_STATE,
    ATTR_STORAGE_ACTION,
    ATTR_STORAGE_ACTIVE,
    ATTR_STORAGE_CAPABILITY,
    ATTR_STORAGE_CURRENT,
    ATTR_STORAGE_PREPARED,
    ATTR_STORAGE_STATE,
    Instruments,
    Key,
)

#: How often the leader refreshes the gauges.
REFRESH_INTERVAL = 30.0
#: Reported values older than this are dropped (the leader stopped refreshing them).
_STALE_AFTER = 3 * REFRESH_INTERVAL
#: Queues remembered for their zero readings (a bound, should names keep changing).
_MAX_REMEMBERED_QUEUES = 10_000

Points = list[tuple[float, Key]]


def storage_points(observation: TransitionObservation) -> dict[str, Points]:
    """The ``awa.storage.*`` readings of one observation."""
    status = observation.status
    state: Key = (
        (ATTR_STORAGE_STATE, status.state.value),
        (ATTR_STORAGE_CURRENT, status.current_engine),
        (ATTR_STORAGE_ACTIVE, status.active_engine),
    )
    if status.prepared_engine is not None:
        state = (*state, (ATTR_STORAGE_PREPARED, status.prepared_engine))
    backlog = observation.canonical_backlog
    report = observation_report(observation)
    ready = {
        "enter_mixed_transition": report["can_enter_mixed_transition"],
        "finalize": report["can_finalize"],
    }
    return {
        "awa.storage.state": [(1.0, state)],
        "awa.storage.transition_ready": [
            (1.0 if can else 0.0, ((ATTR_STORAGE_ACTION, step),)) for step, can in ready.items()
        ],
        "awa.storage.canonical_live_backlog": [] if backlog is None else [(float(backlog), ())],
        "awa.storage.live_runtime_capability": [
            (
                float(observation.live_runtimes.get(capability, 0)),
                ((ATTR_STORAGE_CAPABILITY, capability.value),),
            )
            for capability in StorageCapability
        ],
    }


class QueueGauges:
    """The latest readings, reported to ``instruments`` when a reader collects."""

    def __init__(self, engine: StorageEngine, instruments: Instruments, *, clock: Clock) -> None:
        self._clock = clock
        self._engine = engine
        self._instruments = instruments
        self._points: dict[str, Points] = {}
        self._queues: set[str] = set()
        self._read_at = 0.0
        self._remove: Callable[[], None] | None = None

    def attach(self) -> None:
        """Start reporting (while the maintenance loop runs)."""
        if self._remove is not None:
            return
        names = ["awa.queue.depth", "awa.queue.lag", "awa.job.dlq_depth"]
        if isinstance(self._engine, TransitionObserver):
            names += [n for n in self._instruments.gauge_names() if n.startswith("awa.storage.")]
        self._remove = self._instruments.add_gauge_sources(
            {name: self._source(name) for name in names}
        )

    def detach(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()

    async def refresh(self) -> None:
        depths = await self._engine.queue_depths()
        dlq = await self._engine.dlq_depth_by_queue()
        observation = (
            await self._engine.observe_transition()
            if isinstance(self._engine, TransitionObserver)
            else None
        )
        now = self._clock.now()
        points: dict[str, Points] = {"awa.queue.depth": [], "awa.queue.lag": []}
        seen = set()
        for queue in depths:
            seen.add(queue.queue)
            for state in DEPTH_STATES:
                key: Key = ((ATTR_QUEUE, queue.queue), (ATTR_STATE, state.name.lower()))
                points["awa.queue.depth"].append((float(queue.count(state)), key))
            points["awa.queue.lag"].append((queue.lag_seconds(now), ((ATTR_QUEUE, queue.queue),)))
        for gone in sorted(self._queues - seen):
            for state in DEPTH_STATES:
                key = ((ATTR_QUEUE, gone), (ATTR_STATE, state.name.lower()))
                points["awa.queue.depth"].append((0.0, key))
            points["awa.queue.lag"].append((0.0, ((ATTR_QUEUE, gone),)))
        if len(self._queues | seen) <= _MAX_REMEMBERED_QUEUES:
            self._queues |= seen
        points["awa.job.dlq_depth"] = [(float(n), ((ATTR_QUEUE, q),)) for q, n in dlq]
        if observation is not None:
            points.update(storage_points(observation))
        self._points = points
        self._read_at = self._clock.monotonic()

    def _source(self, name: str) -> Callable[[], Points]:
        def read() -> Points:
            if self._clock.monotonic() - self._read_at > _STALE_AFTER:
                return []
            return self._points.get(name, [])

        return read
