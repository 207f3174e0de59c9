"""The ``engine`` fixture hands every test a state indistinguishable from a fresh engine.

Postgres engines keep one database per engine for the session and start each test from
``reset`` (see ``conftest``), and the fixture skips the set-up steps that database has
already been through in this process. This test leaves behind what tests leave (a running
attempt, a DLQ entry, a scheduled job, a unique claim, queue settings, a moved clock), then
opens the next test's engine the way the fixture does and checks that none of it shows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.ports.storage import DlqFilter, JobFilter
from tests.contract._support import QUEUE, claim_one, enable_dlq, enqueue
from tests.contract.conftest import contract_engine
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio


async def test_what_a_test_leaves_behind_never_reaches_the_next(
    engine: EngineHandle, request: pytest.FixtureRequest
) -> None:
    await enable_dlq(engine)
    await engine.engine.pause_queue("canary_paused", paused_by="canary")
    await enqueue(engine, "canary_dead")
    dead = await claim_one(engine)
    await engine.engine.fail(dead.lease, error="fatal")
    await enqueue(engine, "canary_running")
    await claim_one(engine)
    await enqueue(engine, "canary_later", run_at=engine.clock.now() + timedelta(hours=1))
    await enqueue(engine, "canary_unique", unique_key=b"canary")
    engine.clock.advance(timedelta(hours=2))
    assert await engine.engine.get_dlq(dead.job.id) is not None
    assert len(await engine.engine.list_jobs(JobFilter())) == 3

    async with contract_engine(request, request.node.callspec.params["engine"]) as fresh:
        assert fresh.clock.now() == ManualClock().now()
        assert await fresh.engine.list_jobs(JobFilter()) == []
        assert await fresh.engine.list_dlq(DlqFilter()) == []
        assert await fresh.engine.dlq_depth() == 0
        assert await fresh.engine.queue_counts() == []
        assert await fresh.engine.claim(QUEUE, limit=10) == []
        # The unique claim went with its job: the same key is accepted again.
        again = await enqueue(fresh, "canary_unique", unique_key=b"canary")
        assert [job.id for job in await fresh.engine.list_jobs(JobFilter())] == [again.id]
