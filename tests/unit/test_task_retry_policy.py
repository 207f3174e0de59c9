"""``@client.task(Args, retry=awa.RetryPolicy(...))``: the kind's policy decides its
handler failures (delay and budget), the worker's log states them, and bad values are
refused when the task is declared."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

import attrs
import pytest

import awa
from awa.domain.keywords import keywords_of
from awa.domain.kind_policies import KindPolicy
from awa.domain.states import JobState
from awa.entrypoints.task_options import PolicyOptions, TaskOptions, WorkerOptions
from awa.testing import memory_client, work_next

pytestmark = pytest.mark.anyio


@attrs.frozen
class Flaky:
    n: int


@attrs.frozen
class Steady:
    n: int


async def test_a_tasks_retry_policy_decides_its_failures(caplog: pytest.LogCaptureFixture) -> None:
    client = memory_client()
    policy = awa.RetryPolicy(max_attempts=2, backoff="constant", base=60, jitter=0)

    @client.task(Flaky, retry=policy)
    def flaky(job: awa.Job[Flaky]) -> None:
        raise RuntimeError("upstream down")

    @client.task(Steady)
    def steady(job: awa.Job[Steady]) -> None:
        raise RuntimeError("upstream down")

    job = await client.insert(Flaky(1))  # the job's own budget: 25
    with caplog.at_level(logging.INFO, logger="awa"):
        result = await work_next(client)
    assert result.outcome == "retryable"
    row = (await client.get_job(job.id)).record
    failed_at = datetime.fromisoformat(row.errors[-1]["at"])
    assert row.run_at == failed_at + timedelta(seconds=60)
    assert "attempt 1/2) failed and will be retried in 60 s to 60 s" in caplog.text

    other = await client.insert(Steady(1))
    assert (await work_next(client)).outcome == "retryable"
    row = (await client.get_job(other.id)).record
    failed_at = datetime.fromisoformat(row.errors[-1]["at"])
    # A task without a policy keeps awa-pg's backoff: 2^1 s plus up to 25 %.
    assert timedelta(seconds=2) <= row.run_at - failed_at <= timedelta(seconds=2.5)


async def test_a_tasks_budget_ends_the_job_before_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = memory_client()

    @client.task(Flaky, retry=awa.RetryPolicy(max_attempts=1))
    def flaky(job: awa.Job[Flaky]) -> None:
        raise RuntimeError("upstream down")

    job = await client.insert(Flaky(1))  # the job's own budget: 25
    with caplog.at_level(logging.INFO, logger="awa"):
        assert (await work_next(client)).outcome == "failed"
    record = (await client.get_job(job.id)).record
    assert (record.state, record.max_attempts) == (JobState.Failed, 25)
    assert "attempt 1/1) failed on its last attempt" in caplog.text


def test_a_task_refuses_a_retry_that_is_not_a_policy() -> None:
    client = memory_client()
    with pytest.raises(awa.ValidationError) as refused:
        client.task(Flaky, retry={"max_attempts": 3})  # type: ignore[arg-type]
    assert refused.value.field == "retry"


def test_bad_policy_values_are_refused_naming_the_field() -> None:
    with pytest.raises(awa.ValidationError, match="jitter"):
        awa.RetryPolicy(jitter=float("nan"))
    with pytest.raises(awa.ValidationError, match="backoff"):
        awa.RetryPolicy(backoff="quadratic")


async def test_declaring_the_task_again_without_a_policy_restores_the_default() -> None:
    client = memory_client()

    @client.task(Flaky, retry=awa.RetryPolicy(max_attempts=1))
    def first(job: awa.Job[Flaky]) -> None:
        raise RuntimeError("x")

    @client.task(Flaky)
    def second(job: awa.Job[Flaky]) -> None:
        raise RuntimeError("x")

    await client.insert(Flaky(1))
    assert (await work_next(client)).outcome == "retryable"


def test_each_policy_option_is_a_part_of_the_kind_policy_registry() -> None:
    # task_options.policy_parts hands each option to the registry under its own name.
    assert keywords_of(PolicyOptions) <= {field.name for field in attrs.fields(KindPolicy)}
    assert keywords_of(PolicyOptions) <= keywords_of(WorkerOptions) <= keywords_of(TaskOptions)


def test_a_misspelt_task_keyword_is_refused_as_python_would() -> None:
    client = memory_client()
    with pytest.raises(
        TypeError, match=re.escape("AsyncClient.task() got an unexpected keyword argument 'retyr'")
    ):
        client.task(Flaky, retyr=awa.RetryPolicy())  # type: ignore[call-arg]
    with pytest.raises(
        TypeError,
        match=re.escape("AsyncClient.worker() got an unexpected keyword argument 'store_result'"),
    ):
        client.worker(Flaky, store_result=True)  # type: ignore[call-arg]
