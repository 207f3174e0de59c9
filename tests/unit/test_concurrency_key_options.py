"""``insert(..., concurrency_key=...)`` and a queue's ``max_running_per_key``: the key is
stored with the job (its metadata), bad keys and limits are refused naming the field, and
a runtime claims under the limit (changed live through an override)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import attrs
import pytest

from awa.domain.errors import ValidationError
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA, concurrency_key_of
from awa.domain.job import JobSpec
from awa.domain.overrides import QueueOverrides
from awa.domain.states import JobState
from awa.entrypoints.bridge import _prepare
from awa.entrypoints.routing import inmemory_control_plane
from awa.runtime import AttemptContext, HandlerRegistry
from awa.runtime.config import parse_start_args
from awa.testing import memory_client
from tests.unit.test_runtime_support import fast_config, make_engine, running, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@attrs.frozen
class Call:
    n: int


async def test_the_key_is_stored_in_the_jobs_metadata() -> None:
    client = memory_client()
    job = await client.insert(Call(1), concurrency_key="tenant-42", metadata={"m": 1})
    record = (await client.get_job(job.id)).record
    assert record.metadata == {"m": 1, CONCURRENCY_KEY_METADATA: "tenant-42"}
    jobs = await client.insert_many_copy(
        [Call(1), Call(2), Call(3)],
        concurrency_key="tenant-1",
        opts=[None, {"concurrency_key": "tenant-2"}, {"concurrency_key": None}],
    )
    keys = [concurrency_key_of((await client.get_job(j.id)).record.metadata) for j in jobs]
    # A job's own entry replaces the batch's key; None there means no key.
    assert keys == ["tenant-1", "tenant-2", None]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"concurrency_key": ""}, "must not be empty"),
        ({"concurrency_key": "k" * 10_000}, "at most 255 bytes"),
        ({"concurrency_key": 42}, "must be a string or None"),
        ({"concurrency_key": "a", "ordering_key": "b"}, "cannot be combined with ordering_key"),
        ({"metadata": {CONCURRENCY_KEY_METADATA: ""}}, "must not be empty"),
    ],
)
async def test_a_bad_key_is_refused_naming_the_field(options: dict[str, Any], words: str) -> None:
    client = memory_client()
    with pytest.raises(ValidationError, match=r"^concurrency_key: ") as caught:
        await client.insert(Call(1), **options)
    assert words in str(caught.value)
    with pytest.raises(ValidationError, match=r"^concurrency_key: "):
        _prepare("insert_job", Call(1), options)  # type: ignore[arg-type]
    assert await client.list_jobs() == []


def test_the_bridge_carries_the_key_in_the_metadata() -> None:
    values = _prepare("insert_job", Call(1), {"concurrency_key": "tenant-42"})
    assert '"awa:concurrency_key": "tenant-42"' in values["metadata"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan"), "2", True])
def test_a_bad_limit_is_refused_naming_the_queue_and_field(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^queue 'q': max_running_per_key: "):
        parse_start_args([{"name": "q", "max_running_per_key": bad}], handler_queues={"q"})


def test_a_limit_with_stripes_is_refused() -> None:
    with pytest.raises(ValueError, match="max_running_per_key needs"):
        parse_start_args(
            [{"name": "q", "max_running_per_key": 1}],
            handler_queues={"q"},
            queue_storage_queue_stripe_count=2,
        )


def test_an_override_of_the_limit_is_checked() -> None:
    from awa.domain.overrides import validate_overrides

    with pytest.raises(ValidationError, match=r"^max_running_per_key: "):
        validate_overrides(QueueOverrides(max_running_per_key=0))


async def test_a_runtime_runs_no_more_than_the_limit_per_key_and_an_override_raises_it() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    release = anyio.Event()
    started: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        started.append(ctx.record.id)
        await release.wait()

    handlers.register("k", handler)
    config = fast_config(
        handlers, [{"name": "default", "max_workers": 10, "max_running_per_key": 1}]
    )

    async def running_keys() -> Counter[str | None]:
        jobs = [await engine.get_job(job.id) for job in inserted]
        return Counter(
            concurrency_key_of(j.metadata)
            for j in jobs
            if j is not None and j.state == JobState.Running
        )

    control = inmemory_control_plane(engine, engine._clock)
    async with running(engine, handlers, config, control=control):
        specs = [
            JobSpec(kind="k", metadata={CONCURRENCY_KEY_METADATA: key})
            for key in ("a", "a", "a", "b", "b")
        ]
        inserted = await engine.enqueue_many(specs)
        await wait_until(lambda: len(started) == 2)
        assert await running_keys() == {"a": 1, "b": 1}
        # Raised live, as `awa queue overrides set default --max-running-per-key 2` does:
        # the dispatcher picks it up at its next refresh of the overrides.
        await control.overrides.set_queue_overrides(
            "default", QueueOverrides(max_running_per_key=2)
        )
        await wait_until(lambda: len(started) == 4, timeout=60)
        assert await running_keys() == {"a": 2, "b": 2}
        release.set()
        await wait_until(lambda: len(started) == 5)
