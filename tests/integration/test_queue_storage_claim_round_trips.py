"""Claims that run beside each other (claims ahead, several claim loops) each cost one
round trip of one statement: both claim in the ring slot the queue's rows are in (not one
of them over the whole ring, which reads the ring's partitioned parents), and the one on
the kept connection where that slot's claim was not yet prepared sends the Parse with
the execution, not in a round trip of its own (issue 39)."""

from __future__ import annotations

import asyncio

import pytest

from awa.domain.job import JobSpec
from tests.support.queue_storage import installed_engine
from tests.support.wire import WireCounter

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SCHEMA = "qs_claim_rt"
QUEUE = "beside"
#: A phrase of the ring-wide claim's text (claim.sql, ``claim``).
RING_WIDE = "The common claim"
#: A phrase of the one-slot claim's text for a queue of one lane (claim.sql,
#: ``claim_lone_in_slot``).
IN_SLOT = "The claim of one lane in one ring slot"


async def test_claims_beside_each_other_claim_in_the_slot_in_one_round_trip_each(
    migrated_database_url: str,
) -> None:
    async with (
        WireCounter(migrated_database_url) as wire,
        installed_engine(wire.url(), SCHEMA) as engine,
    ):
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={})])
        # The first claim reads the whole ring and finds the row's slot; that slot's
        # claim is then planned on a second kept connection.
        assert len(await engine.claim(QUEUE, limit=1)) == 1
        await engine._parts.claims.drain()
        await engine.enqueue_many([JobSpec(kind="k", queue=QUEUE, args={}) for _ in range(4)])

        mark = wire.mark()
        batches = await asyncio.gather(engine.claim(QUEUE, limit=2), engine.claim(QUEUE, limit=2))
        bursts = wire.since(mark)

    taken = [c.lease.job_id for batch in batches for c in batch]
    # The four jobs share one lane: a claim that reaches it while the other holds its
    # head passes it by (SKIP LOCKED) and comes back empty, which a busy host makes
    # likely; either way no job is taken twice.
    assert len(taken) == len(set(taken)) and len(taken) in (2, 4)
    texts = [t for b in bursts for t in b.texts(wire.link(b).named)]
    described = [(b.link, b.kinds(), [t[:50] for t in b.texts(wire.link(b).named)]) for b in bursts]
    assert not [t for t in texts if RING_WIDE in t], described
    # Two round trips, one statement each, both the slot's claim, on two connections.
    assert len(bursts) == 2 and all(b.executes == 1 for b in bursts), described
    assert all(IN_SLOT in t for t in texts), described
    assert len({b.link for b in bursts}) == 2, described
