"""A claim under ``max_running_per_key`` alone is two round trips when its first walk of
the keys gives a whole window (ADR 0029, "The limited claim in two round trips"): the walk
that locks the keys, their count and the claim travel together, and the writes with the
COMMIT after them. When the count finds keys at their limit among a full first walk, the
claim sent with it takes nothing and the window's further walks and a second claim
follow in the same transaction, so the key with room beyond them is still taken."""

from __future__ import annotations

import pytest

from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, concurrency_key_of
from awa.domain.job import Claim, JobSpec
from tests.support.queue_storage import installed_engine
from tests.support.wire import WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_limited_rt"
QUEUE = "limited"
#: Phrases of the statements' texts (claim.sql).
WALK = "keyed_lanes_with_work and the keys' transaction-scoped locks"
COUNT = "live_per_keyed_lane of the keys a claim's first walk locked"
CLAIM = "claim_sorted under a per-key limit"


def _keys(claims: list[Claim]) -> list[str]:
    return sorted(concurrency_key_of(c.job.metadata) or "" for c in claims)


def _keyed(key: str) -> JobSpec:
    return JobSpec(kind="k", queue=QUEUE, args={}, metadata={CONCURRENCY_KEY_METADATA: key})


async def test_a_limited_claim_with_a_whole_window_is_two_round_trips(
    migrated_database_url: str,
) -> None:
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        await engine.enqueue_many([_keyed(f"tenant-{i}") for i in range(3) for _ in range(2)])
        mark = wire.mark()
        claims = await engine.claim(QUEUE, limit=3, max_running_per_key=2)
        bursts = wire.since(mark)

    # One job of each key: every key's first before any key's second.
    assert _keys(claims) == ["tenant-0", "tenant-1", "tenant-2"]
    described = [(b.link, b.kinds(), [t[:60] for t in b.texts(wire.link(b).named)]) for b in bursts]
    assert len(bursts) == 2, described
    first = " | ".join(bursts[0].texts(wire.link(bursts[0]).named))
    assert WALK in first and COUNT in first and CLAIM in first, described


async def test_keys_at_their_limit_in_the_first_walk_leave_the_claim_to_the_further_walks(
    migrated_database_url: str,
) -> None:
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        # Two keys with a second job each, and a third key after them in the rotation.
        await engine.enqueue_many([_keyed("tenant-0"), _keyed("tenant-1")] * 2)
        await engine.enqueue_many([_keyed("tenant-2")])
        held = await engine.claim(QUEUE, limit=2, max_running_per_key=1)
        assert _keys(held) == ["tenant-0", "tenant-1"]
        mark = wire.mark()
        # The first walk (after the cursor, from the first key again) meets the two keys
        # at their limit: the window is not whole, the claim sent with the count takes
        # nothing, and the further walk finds the third key.
        claims = await engine.claim(QUEUE, limit=2, max_running_per_key=1)
        bursts = wire.since(mark)

    assert _keys(claims) == ["tenant-2"]
    texts = [t for b in bursts for t in b.texts(wire.link(b).named)]
    assert sum(CLAIM in t for t in texts) == 2, [t[:60] for t in texts]
