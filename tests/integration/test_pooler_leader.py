"""The maintenance lease through a real PgBouncer in transaction mode (ADR 0014): every
lease statement may land on a different server connection, and leadership still has one
holder at a time, changes hands when the holder stops renewing, and leads maintenance.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from awa import AsyncClient, Job, JobState
from awa.adapters._pg.leader import PostgresLeaderLock
from tests.support.pgbouncer import PgBouncer
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(60)]


@dataclasses.dataclass
class Beat:
    n: int


@pytest.fixture
def pooled_url(pgbouncer_running: PgBouncer, migrated_database_url: str) -> str:
    return pgbouncer_running.url(migrated_database_url)


async def test_the_lease_has_one_holder_and_changes_hands_through_the_pooler(
    pooled_url: str,
) -> None:
    first = PostgresLeaderLock(pooled_url, holder="a/1/first")
    second = PostgresLeaderLock(pooled_url, holder="b/2/second")
    try:
        taken = await first.try_acquire(0.5)
        assert taken.held
        # Renewals and checks land on whichever server connection the pooler lends.
        for _ in range(5):
            assert (await first.try_acquire(0.5)).term == taken.term
            assert (await second.try_acquire(0.5)).held is False
            assert await first.still_held()
        # The holder stops renewing: its lease ends and the other candidate takes over.

        async def second_leads() -> bool:
            return (await second.try_acquire(30.0)).held

        await until(second_leads, "the second candidate leads")
        late = await first.try_acquire(30.0)
        assert (late.held, late.holder, late.term) == (False, "b/2/second", taken.term + 1)
    finally:
        await first.release()
        await second.release()


async def test_workers_elect_one_leader_through_the_pooler_and_it_promotes(
    pooled_url: str,
) -> None:
    options = {"leader_lease_ttl_ms": 1000, "leader_election_interval_ms": 200}
    clients = [AsyncClient(pooled_url, max_connections=4) for _ in range(2)]
    for client in clients:

        @client.task(Beat, kind="beat", queue="beats")
        async def beat(job: Job[Beat]) -> None:
            return None

    try:
        for client in clients:
            await client.start([("beats", 2)], **options)  # type: ignore[arg-type]

        async def leaders() -> list[AsyncClient]:
            return [c for c in clients if (await c.health_check()).leader]

        async def one_leader() -> bool:
            return len(await leaders()) == 1

        await until(one_leader, "one leader")
        [leader] = await leaders()
        follower = next(c for c in clients if c is not leader)
        # The leader goes away; the follower takes the lease and promotes.
        await leader.shutdown()

        async def follower_leads() -> bool:
            return (await follower.health_check()).leader

        await until(follower_leads, "the follower leads")
        job = await follower.insert(
            Beat(1), queue="beats", run_at=datetime.now(UTC) + timedelta(seconds=0.5)
        )

        async def completed() -> bool:
            return (await follower.get_job(job.id)).state == JobState.Completed

        await until(completed, "the job completed")
    finally:
        for client in clients:
            await client.shutdown()
            await client.close()
