"""The cron store (:class:`awa.ports.cron.CronStore`), once per backend (the ``backend``
fixture): the store is the backend's, whatever engine runs its jobs. The Postgres backend's
database routes producers to queue storage (a fresh install does), so a fire lands there
through ``insert_job_compat``; the engine a client runs over it reads the job back.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from awa.adapters.clock import ManualClock
from awa.domain.cron import CronSchedule, MissedFirePolicy
from awa.domain.states import JobState
from awa.ports.control_plane import ControlPlane
from awa.ports.cron import CronStore
from awa.ports.storage import JobFilter, StorageEngine
from tests.contract.conftest import BackendHandle

pytestmark = pytest.mark.anyio

QUEUE = "cron_contract"
SLOT = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@attrs.frozen
class Cron:
    """A backend's cron store, the engine its fires land in, and the clock."""

    engine: StorageEngine
    store: CronStore
    control: ControlPlane
    clock: ManualClock


@pytest.fixture
def cron(backend: BackendHandle) -> Cron:
    return Cron(backend.engine, backend.control.cron, backend.control, backend.clock)


def schedule(name: str = "nightly", **fields: Any) -> CronSchedule:
    values: dict[str, Any] = {
        "cron_expr": "0 3 * * *",
        "kind": "report",
        "args": {"format": "pdf"},
        "queue": QUEUE,
        "timezone": "Europe/Berlin",
        "priority": 3,
        "max_attempts": 5,
        "tags": ("nightly",),
        "metadata": {"team": "ops"},
    }
    values.update(fields)
    return CronSchedule(name=name, **values)


async def _jobs(cron: Cron) -> list[Any]:
    return await cron.engine.list_jobs(JobFilter(queue=QUEUE), limit=1000)


async def test_declared_schedules_are_stored_and_listed_by_name(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule("b"), schedule("a", cron_expr="*/5 * * * * *")])
    listed = await cron.store.list_cron_jobs()
    assert [job.name for job in listed] == ["a", "b"]
    stored = await cron.store.get_cron_job("b")
    assert stored is not None and stored.schedule == schedule("b")
    assert stored.last_enqueued_at is None and not stored.paused and stored.paused_by is None
    assert await cron.store.get_cron_job("missing") is None


async def test_a_new_declaration_updates_fields_and_keeps_state_and_other_rows(
    cron: Cron,
) -> None:
    await cron.store.upsert_cron_jobs([schedule("a"), schedule("b")])
    assert await cron.store.fire_cron_job("a", fire_at=SLOT, previous=None) is not None
    assert await cron.store.pause_cron_job("a", paused_by="ops")
    changed = schedule("a", cron_expr="0 4 * * *", missed_fire_policy=MissedFirePolicy.CATCH_UP)
    await cron.store.upsert_cron_jobs([changed])
    stored = await cron.store.get_cron_job("a")
    assert stored is not None and stored.schedule == changed
    assert stored.last_enqueued_at == SLOT and stored.paused and stored.paused_by == "ops"
    assert await cron.store.get_cron_job("b") is not None


async def test_a_fire_advances_the_schedule_and_enqueues_its_job(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule()])
    job = await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None)
    assert job is not None
    assert (job.kind, job.queue, job.args) == ("report", QUEUE, {"format": "pdf"})
    assert (job.priority, job.max_attempts, tuple(job.tags)) == (3, 5, ("nightly",))
    assert job.state == JobState.Available
    assert job.metadata == {
        "team": "ops",
        "cron_name": "nightly",
        "cron_fire_time": "2030-01-01 12:00:00+00",
    }
    assert await cron.engine.get_job(job.id) == job
    stored = await cron.store.get_cron_job("nightly")
    assert stored is not None and stored.last_enqueued_at == SLOT
    later = SLOT + timedelta(days=1)
    assert await cron.store.fire_cron_job("nightly", fire_at=later, previous=SLOT) is not None
    assert len(await _jobs(cron)) == 2


async def test_a_fire_with_a_stale_previous_time_changes_nothing(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule()])
    assert await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None) is not None
    again = SLOT + timedelta(days=1)
    assert await cron.store.fire_cron_job("nightly", fire_at=again, previous=None) is None
    assert await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None) is None
    assert await cron.store.fire_cron_job("missing", fire_at=SLOT, previous=None) is None
    assert len(await _jobs(cron)) == 1
    stored = await cron.store.get_cron_job("nightly")
    assert stored is not None and stored.last_enqueued_at == SLOT


async def test_racing_fires_of_one_slot_enqueue_it_once(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule()])
    results = await asyncio.gather(
        *(cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None) for _ in range(8))
    )
    assert sum(result is not None for result in results) == 1
    assert len(await _jobs(cron)) == 1


async def test_a_paused_schedule_does_not_fire_but_can_be_triggered(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule()])
    assert await cron.store.pause_cron_job("nightly", paused_by="alice")
    assert await cron.store.pause_cron_job("nightly", paused_by="bob")
    stored = await cron.store.get_cron_job("nightly")
    assert stored is not None and stored.paused and stored.paused_by == "alice"
    assert await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None) is None
    triggered = await cron.store.trigger_cron_job("nightly")
    assert triggered is not None and triggered.state == JobState.Available
    assert triggered.metadata == {"team": "ops", "cron_name": "nightly", "triggered_manually": True}
    after = await cron.store.get_cron_job("nightly")
    assert after is not None and after.last_enqueued_at is None and after.paused
    assert await cron.store.resume_cron_job("nightly")
    resumed = await cron.store.get_cron_job("nightly")
    assert resumed is not None and not resumed.paused and resumed.paused_by is None
    assert await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None) is not None
    assert len(await _jobs(cron)) == 2


async def test_unknown_schedules_and_delete(cron: Cron) -> None:
    assert not await cron.store.pause_cron_job("missing")
    assert not await cron.store.resume_cron_job("missing")
    assert await cron.store.trigger_cron_job("missing") is None
    await cron.store.upsert_cron_jobs([schedule()])
    fired = await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None)
    assert fired is not None
    assert await cron.store.delete_cron_job("nightly")
    assert not await cron.store.delete_cron_job("nightly")
    assert await cron.store.list_cron_jobs() == []
    # The jobs a schedule enqueued outlive it.
    assert await cron.engine.get_job(fired.id) is not None


async def test_fires_into_a_paused_queue_are_kept_until_it_resumes(cron: Cron) -> None:
    await cron.store.upsert_cron_jobs([schedule()])
    await cron.engine.pause_queue(QUEUE)
    fired = await cron.store.fire_cron_job("nightly", fire_at=SLOT, previous=None)
    assert fired is not None
    assert await cron.engine.claim(QUEUE, limit=10) == []
    await cron.engine.resume_queue(QUEUE)
    claims = await cron.engine.claim(QUEUE, limit=10)
    assert [claim.job.id for claim in claims] == [fired.id]
