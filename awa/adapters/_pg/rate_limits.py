"""Fleet-wide rate limiters in ``awa.rate_limiters``, shared by every Postgres engine
(ADR 0029, "Rate limits"). A claim locks the limiters it needs in its own transaction,
claims at most what :func:`~awa.domain.rate_limits.admission` allows, and stores what
:func:`~awa.domain.rate_limits.advanced` computes before it commits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection, DictPool
from awa.adapters._pg.sql import load_queries
from awa.domain.rate_limits import (
    QUEUE_LIMITER,
    Admission,
    GlobalRateLimit,
    LimiterState,
    admission,
    advanced,
    allowance,
    resume_at,
)


def _query(name: str) -> bytes:
    return load_queries("awa.adapters._pg", "rate_limits.sql")[name].encode()


@attrs.define
class HeldLimiters:
    """The limiters one claim transaction holds locked, and what they admit."""

    queue: str
    now: datetime
    queue_limit: GlobalRateLimit | None
    per_key_limit: GlobalRateLimit | None
    queue_tat: datetime | None
    key_tats: dict[str, datetime | None]
    allowed: Admission

    wanted: int = 0
    #: The queue limiter's ``tat`` after :meth:`store` (its read value until then).
    queue_tat_after: datetime | None = None

    @property
    def next_admission(self) -> datetime | None:
        """When a claim the queue's limiter cut short should look again (``None``: the
        limiter did not cut it): :func:`~awa.domain.rate_limits.resume_at`."""
        if self.queue_limit is None or self.allowed.limit >= self.wanted:
            return None
        tat = self.queue_tat_after if self.queue_tat_after is not None else self.queue_tat
        return resume_at(self.queue_limit, tat, self.now)

    async def store(
        self, conn: DictConnection, *, taken: int, taken_per_key: dict[str, int]
    ) -> None:
        """Move the limiters forward by what the claim took."""
        tats = advanced(
            queue_limit=self.queue_limit,
            queue_tat=self.queue_tat,
            per_key_limit=self.per_key_limit,
            key_tats=self.key_tats,
            taken_per_key=taken_per_key,
            taken=taken,
            now=self.now,
        )
        self.queue_tat_after = tats.get(QUEUE_LIMITER, self.queue_tat)
        if not tats:
            return
        params = {
            "queue": self.queue,
            "now": self.now,
            "names": list(tats),
            "tats": list(tats.values()),
        }
        await conn.execute(_query("store_rate_limiters"), params)


async def lock_limiters(
    conn: DictConnection,
    queue: str,
    *,
    queue_limit: GlobalRateLimit | None,
    per_key_limit: GlobalRateLimit | None,
    key_names: Iterable[str],
    wanted: int,
    now: datetime,
) -> HeldLimiters:
    """Lock (creating on first use) the queue's limiter and each key's, queue first and
    keys sorted, and compute what they admit at ``now``."""
    names: list[str] = []
    rates: list[float] = []
    bursts: list[int] = []
    if queue_limit is not None:
        names.append(QUEUE_LIMITER)
        rates.append(queue_limit.rate)
        bursts.append(queue_limit.burst)
    keys = sorted(set(key_names)) if per_key_limit is not None else []
    for name in keys:
        assert per_key_limit is not None
        names.append(name)
        rates.append(per_key_limit.rate)
        bursts.append(per_key_limit.burst)
    tats: dict[str, datetime] = {}
    if names:
        cur = await conn.execute(
            _query("lock_rate_limiters"),
            {"queue": queue, "now": now, "names": names, "rates": rates, "bursts": bursts},
        )
        tats = {row["limiter"]: row["tat"] for row in await cur.fetchall()}
    queue_tat = tats.get(QUEUE_LIMITER)
    key_tats: dict[str, datetime | None] = {name: tats.get(name) for name in keys}
    allowed = admission(
        queue_limit=queue_limit,
        queue_tat=queue_tat,
        per_key_limit=per_key_limit,
        key_tats=key_tats,
        wanted=wanted,
        now=now,
    )
    return HeldLimiters(
        queue=queue,
        now=now,
        queue_limit=queue_limit,
        per_key_limit=per_key_limit,
        queue_tat=queue_tat,
        key_tats=key_tats,
        allowed=allowed,
        wanted=wanted,
    )


async def key_allowances(
    conn: DictConnection,
    queue: str,
    *,
    per_key_limit: GlobalRateLimit,
    key_names: Sequence[str],
    now: datetime,
) -> dict[str, int]:
    """What each key's limiter would admit at ``now``, read without a lock: for a claim
    to pass over the keys without a token when it chooses its keys (ADR 0029, "A key
    without a token gives its place"); :func:`lock_limiters` decides."""
    cur = await conn.execute(_query("read_rate_limiters"), {"queue": queue, "names": key_names})
    tats = {row["limiter"]: row["tat"] for row in await cur.fetchall()}
    return {name: allowance(per_key_limit, tats.get(name), now) for name in key_names}


class PgRateLimiterReader:
    """:class:`~awa.ports.rate_limiters.RateLimiterReader` on ``awa.rate_limiters``."""

    def __init__(self, pool: DictPool) -> None:
        self._pool = pool

    async def limiter_states(self) -> list[LimiterState]:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(_query("list_rate_limiters"))
            rows = await cur.fetchall()
        return [
            LimiterState(
                queue=row["queue"],
                limiter=row["limiter"],
                tat=row["tat"],
                limit=GlobalRateLimit(rate=float(row["rate"]), burst=int(row["burst"])),
            )
            for row in rows
        ]

    async def prune_idle_limiters(self, *, now: datetime, limit: int) -> int:
        async with translated_errors(), self._pool.connection() as conn:
            cur = await conn.execute(
                _query("prune_idle_rate_limiters"), {"now": now, "limit": limit}
            )
            return cur.rowcount
