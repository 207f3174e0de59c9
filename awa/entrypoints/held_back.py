"""The limits in force on a queue, and the per-job held-back reason read with them, for
``get_job``/``list_jobs``, ``awa job``, the admin API and the admin pages (ADR 0029).

The rule is the domain's (:func:`awa.domain.held_back.held_back_reason`); this module
gathers what it needs from the backend's control plane once per call: per queue the
limits in force and its limiters, per ``(queue, key)`` the slots held, never per job."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from awa.domain.flow_control import SLOT_STATES, concurrency_key_of
from awa.domain.held_back import HeldBack, held_back_reason
from awa.domain.job import JobRecord
from awa.domain.rate_limits import (
    QUEUE_LIMITER,
    GlobalRateLimit,
    LimiterState,
    held_back_by_rate,
    key_limiter,
)
from awa.domain.runtimes import is_live
from awa.domain.states import JobState

if TYPE_CHECKING:
    from awa.ports.control_plane import ControlPlane
    from awa.ports.runtime_registry import RuntimeSnapshot

#: The override fields that limit how fast or how many of a queue's jobs run, shown
#: beside its keys (``awa.domain.overrides.QueueOverrides``).
LIMIT_FIELDS = (
    "max_running_per_key",
    "rate_limit_per_second",
    "rate_limit_burst",
    "global_rate_per_second",
    "global_rate_burst",
    "global_rate_per_key_per_second",
    "global_rate_per_key_burst",
)


async def limits_in_force(
    control: ControlPlane, queue: str, runtimes: list[RuntimeSnapshot] | None = None
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """The limits in force on ``queue`` (by :data:`LIMIT_FIELDS`) and where each comes
    from: an operator's override (``"override"``), else the queue config the live
    workers publish (``"workers"``, the smallest when they disagree), else ``None``.
    ``runtimes`` saves reading the registry again for several queues."""
    overrides = await control.overrides.get_queue_overrides(queue)
    if runtimes is None:
        runtimes = await control.registry.list_runtimes()
    configured = _configured_limits(runtimes, queue)
    limits: dict[str, Any] = {}
    sources: dict[str, str | None] = {}
    for field in LIMIT_FIELDS:
        set_by_override = None if overrides is None else getattr(overrides, field)
        if set_by_override is not None:
            limits[field], sources[field] = set_by_override, "override"
        elif configured.get(field) is not None:
            limits[field], sources[field] = configured[field], "workers"
        else:
            limits[field], sources[field] = None, None
    return limits, sources


def _configured_limits(runtimes: list[RuntimeSnapshot], queue: str) -> dict[str, Any]:
    """The limits the live runtimes serving ``queue`` configure, the smallest of each."""
    now = datetime.now(UTC)
    found: dict[str, Any] = {}
    for runtime in runtimes:
        if not is_live(
            runtime.last_seen_at,
            runtime.snapshot_interval_ms,
            now,
            shutting_down=runtime.shutting_down,
        ):
            continue
        for q in runtime.queues:
            if q.name != queue:
                continue
            values = {
                "max_running_per_key": q.max_running_per_key,
                "rate_limit_per_second": None if q.rate_limit is None else q.rate_limit[0],
                "rate_limit_burst": None if q.rate_limit is None else q.rate_limit[1],
                "global_rate_per_second": q.global_rate_per_second,
                "global_rate_burst": q.global_rate_burst,
                "global_rate_per_key_per_second": q.global_rate_per_key_per_second,
                "global_rate_per_key_burst": q.global_rate_per_key_burst,
            }
            for field, value in values.items():
                if value is not None:
                    found[field] = value if field not in found else min(found[field], value)
    return found


def _rate(limits: dict[str, Any], rate_field: str, burst_field: str) -> GlobalRateLimit | None:
    """A fleet-wide rate limit in force: its rate, with its burst (1 when none is set, as
    a dispatcher starts it)."""
    rate = limits[rate_field]
    if rate is None:
        return None
    burst = limits[burst_field]
    return GlobalRateLimit(rate=float(rate), burst=1 if burst is None else int(burst))


async def rate_limited_by_queue(
    control: ControlPlane, available: dict[str, int], now: datetime
) -> dict[str, int]:
    """How many of each queue's ``available`` jobs (by queue) its fleet-wide rate limit
    in force (:func:`limits_in_force`) cannot admit at ``now``; a queue absent holds
    none back. The limits are read only for a queue whose limiter is ahead of ``now``."""
    ahead = {
        row.queue: row.tat
        for row in await control.rate_limiters.limiter_states()
        if row.limiter == QUEUE_LIMITER and row.tat > now and available.get(row.queue, 0) > 0
    }
    if not ahead:
        return {}
    runtimes = await control.registry.list_runtimes()
    held: dict[str, int] = {}
    for queue, tat in sorted(ahead.items()):
        limits = (await limits_in_force(control, queue, runtimes))[0]
        limit = _rate(limits, "global_rate_per_second", "global_rate_burst")
        held[queue] = held_back_by_rate(available[queue], tat, limit, now)
    return held


async def held_back_of(
    control: ControlPlane, records: Sequence[JobRecord], now: datetime
) -> dict[int, HeldBack]:
    """The held-back reason of each of ``records`` that has one, by job id. Reads the
    control plane only when an available job is among them: the runtimes and the
    limiters once, each queue's overrides once, and the slots of its keys in one read."""
    available = [r for r in records if r.state is JobState.Available]
    if not available:
        return {}
    keys: dict[str, set[str]] = {}
    for record in available:
        key = concurrency_key_of(record.metadata)
        of_queue = keys.setdefault(record.queue, set())
        if key is not None:
            of_queue.add(key)
    runtimes = await control.registry.list_runtimes()
    tats: dict[tuple[str, str], datetime] = {}
    limiter_rows: list[LimiterState] = await control.rate_limiters.limiter_states()
    for row in limiter_rows:
        if row.queue in keys:
            tats[(row.queue, row.limiter)] = row.tat
    running_states = sorted(str(s) for s in SLOT_STATES)
    limits: dict[str, dict[str, Any]] = {}
    running: dict[str, dict[str, int]] = {}
    for queue, queue_keys in keys.items():
        limits[queue] = (await limits_in_force(control, queue, runtimes))[0]
        running[queue] = (
            await control.relations.running_of_keys(
                queue, sorted(queue_keys), running_states=running_states
            )
            if queue_keys and limits[queue]["max_running_per_key"] is not None
            else {}
        )
    out: dict[int, HeldBack] = {}
    for record in available:
        key = concurrency_key_of(record.metadata)
        queue_limits = limits[record.queue]
        reason = held_back_reason(
            state=record.state,
            key=key,
            running=0 if key is None else running[record.queue].get(key, 0),
            max_running_per_key=queue_limits["max_running_per_key"],
            queue_rate=_rate(queue_limits, "global_rate_per_second", "global_rate_burst"),
            queue_tat=tats.get((record.queue, QUEUE_LIMITER)),
            key_rate=_rate(
                queue_limits, "global_rate_per_key_per_second", "global_rate_per_key_burst"
            ),
            key_tat=None if key is None else tats.get((record.queue, key_limiter(key))),
            now=now,
        )
        if reason is not None:
            out[record.id] = reason
    return out
