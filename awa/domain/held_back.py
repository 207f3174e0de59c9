"""Why one available job is not being claimed: the per-job held-back reason (ADR 0029).

A job held back by a limit stays ``available`` (no state was added); this module is the
one rule that says which limit holds it, from what the engines already keep:

- **its key's concurrency** (``max_running_per_key``): every slot of its key is held,
  ``running >= limit`` (:func:`awa.domain.flow_control.holds_slot` says what holds one).
  While a slot is free the next claim takes the key's first job, so no job of the key is
  reported held back by the concurrency limit then;
- **the queue's fleet-wide rate** (``global_rate_limit``): the queue's limiter admits no
  job now (:func:`awa.domain.rate_limits.allowance` is 0); the reason carries when it
  admits the next one (:func:`awa.domain.rate_limits.next_admission`);
- **its key's fleet-wide rate** (``global_rate_limit_per_key``): the same, on its key's
  limiter.

They are checked in that order and the first that holds is the reason (a full key waits
for a slot whatever the limiters say). A limit counts only while it is in force (an
override, else what the live workers configure); a limiter never used, or idle, admits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from awa.domain.rate_limits import GlobalRateLimit, allowance, next_admission
from awa.domain.states import JobState

#: The limits that can hold a job back, named as in a queue's config.
MAX_RUNNING_PER_KEY = "max_running_per_key"
GLOBAL_RATE_LIMIT = "global_rate_limit"
GLOBAL_RATE_LIMIT_PER_KEY = "global_rate_limit_per_key"
#: Every limit a reason can name, in the order the rule checks them.
LIMITS = (MAX_RUNNING_PER_KEY, GLOBAL_RATE_LIMIT, GLOBAL_RATE_LIMIT_PER_KEY)


@attrs.frozen
class HeldBack:
    """The limit holding an available job back: ``limit`` names it (a queue config key);
    ``key`` is the job's concurrency key (``None`` for the queue's own rate limit);
    ``running`` and ``max_running`` are the key's held slots and its limit (concurrency
    only); ``next_admission`` is when the limiter admits its next job (rates only)."""

    limit: str
    key: str | None = None
    running: int | None = None
    max_running: int | None = None
    next_admission: datetime | None = None

    def describe(self) -> str:
        """One line for people: ``held back: key tenant-42 has 2 of 2 running``."""
        if self.limit == MAX_RUNNING_PER_KEY:
            return (
                f"held back: key {self.key} has {self.running} of {self.max_running} running"
                f" ({MAX_RUNNING_PER_KEY})"
            )
        at = (
            ""
            if self.next_admission is None
            else f", next admission at {self.next_admission.isoformat()}"
        )
        if self.limit == GLOBAL_RATE_LIMIT_PER_KEY:
            return f"held back: key {self.key} rate limit ({self.limit}){at}"
        return f"held back: queue rate limit ({self.limit}){at}"

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of the CLI and the admin API (times in RFC 3339)."""
        return {
            "limit": self.limit,
            "key": self.key,
            "running": self.running,
            "max_running": self.max_running,
            "next_admission": None
            if self.next_admission is None
            else self.next_admission.isoformat(),
            "reason": self.describe(),
        }


def held_back_reason(
    *,
    state: JobState,
    key: str | None,
    running: int,
    max_running_per_key: int | None,
    queue_rate: GlobalRateLimit | None,
    queue_tat: datetime | None,
    key_rate: GlobalRateLimit | None,
    key_tat: datetime | None,
    now: datetime,
) -> HeldBack | None:
    """The limit holding back a job in ``state`` with concurrency ``key`` (``running``
    of its key's attempts hold a slot), under the limits in force and the limiters'
    ``tat`` (``None``: never used), at ``now``; ``None`` when nothing holds it back."""
    if state is not JobState.Available:
        return None
    if key is not None and max_running_per_key is not None and running >= max_running_per_key:
        return HeldBack(
            MAX_RUNNING_PER_KEY, key=key, running=running, max_running=max_running_per_key
        )
    if queue_rate is not None and allowance(queue_rate, queue_tat, now) == 0:
        return HeldBack(
            GLOBAL_RATE_LIMIT, next_admission=next_admission(queue_rate, queue_tat, now)
        )
    if key is not None and key_rate is not None and allowance(key_rate, key_tat, now) == 0:
        return HeldBack(
            GLOBAL_RATE_LIMIT_PER_KEY,
            key=key,
            next_admission=next_admission(key_rate, key_tat, now),
        )
    return None
