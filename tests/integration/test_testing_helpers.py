"""``awa.testing``: the test client, ``work_one`` outcomes and the ``awa_client`` fixture."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

import awa
from awa.testing import AwaTestClient, HandlerJob, JobRow, NoJob, awa_client, get_database_url

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

__all__ = ["awa_client"]


@dataclasses.dataclass
class Charge:
    amount: int


@pytest.fixture(autouse=True)
def _database_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DATABASE_URL", database_url)
    yield


def test_get_database_url(database_url: str) -> None:
    assert get_database_url() == database_url


async def test_work_one_outcomes(awa_client: AwaTestClient) -> None:
    async def handler(job: HandlerJob[Charge]) -> Any:
        assert isinstance(job.args, Charge)
        if job.args.amount == 1:
            return None
        if job.args.amount == 2:
            return awa.RetryAfter(30)
        if job.args.amount == 3:
            return awa.Snooze(30)
        if job.args.amount == 4:
            return awa.Cancel("refunded")
        if job.args.amount == 5:
            raise awa.TerminalError("card declined")
        raise RuntimeError("network")

    empty = await awa_client.work_one(Charge, handler)
    assert empty.is_no_job() and empty.job is NoJob and repr(NoJob) == "NoJob"
    expected = {
        1: "is_completed",
        2: "is_retryable",
        3: "is_snoozed",
        4: "is_cancelled",
        5: "is_failed",
        6: "is_retryable",
    }
    for amount, check in expected.items():
        inserted = await awa_client.insert(Charge(amount))
        result = await awa_client.work_one(Charge, handler)
        assert getattr(result, check)(), (amount, result)
        assert isinstance(result.job, JobRow) and result.job.id == inserted.id
    last = await awa_client.client.get_job(inserted.id)
    assert last.state == awa.JobState.Retryable and "network" in last.errors[-1]["error"]


async def test_work_one_ignores_other_kinds(awa_client: AwaTestClient) -> None:
    other = await awa_client.insert({"x": 1}, kind="something_else")

    async def handler(job: HandlerJob[Charge]) -> None:
        raise AssertionError("must not run")

    assert (await awa_client.work_one(Charge, handler)).is_no_job()
    assert (await awa_client.client.get_job(other.id)).state == awa.JobState.Available


async def test_clean_removes_jobs(awa_client: AwaTestClient) -> None:
    await awa_client.insert(Charge(1))
    await awa_client.clean()
    assert await awa_client.client.list_jobs() == []
