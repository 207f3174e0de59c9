"""While a runtime runs, what existed at its start is frozen out of full collections."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from awa.runtime import AttemptContext, HandlerRegistry, heap
from tests.unit.test_runtime_support import enqueue, fast_config, make_engine, running, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_a_running_runtime_keeps_full_collections_short() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    done: list[int] = []

    async def handler(ctx: AttemptContext) -> None:
        done.append(ctx.lease.job_id)

    handlers.register("k", handler)
    assert gc.get_freeze_count() == 0
    async with running(engine, handlers, fast_config(handlers)):
        # everything alive at start: this process's modules, the test runner, the engine
        assert gc.get_freeze_count() > 10_000
        [record] = await enqueue(engine, "k")
        await wait_until(lambda: done == [record.id])
        gc.collect()
        # What a full collection visits (every generation but the frozen one): only what
        # was allocated since the start, a small part of the heap.
        assert len(gc.get_objects()) < gc.get_freeze_count() / 4
    assert gc.get_freeze_count() == 0
    # thawed: full collections visit everything again
    assert len(gc.get_objects()) > 10_000


async def test_the_last_runtime_to_stop_unfreezes() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register("k", lambda ctx: None)
    async with running(engine, handlers, fast_config(handlers)):
        first = gc.get_freeze_count()
        other = make_engine()
        async with running(other, handlers, fast_config(handlers), leader=False):
            assert gc.get_freeze_count() >= first > 0
        # the first runtime still runs: still frozen
        assert gc.get_freeze_count() >= first
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
async def test_awa_gc_freeze_off_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(heap.ENV, value)
    engine = make_engine()
    handlers = HandlerRegistry()
    handlers.register("k", lambda ctx: None)
    async with running(engine, handlers, fast_config(handlers)):
        assert gc.get_freeze_count() == 0
    assert not heap.enabled()
    monkeypatch.setenv(heap.ENV, "1")
    assert heap.enabled()


def test_freezing_collects_only_the_young_generations() -> None:
    """A full collection at start visits every object of the process (57-81 ms of the
    start on a busy host) and found nothing to free there: only the young generations
    are collected before freezing."""
    collected: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        assert heap.freeze()
    finally:
        gc.callbacks.remove(seen)
        heap.thaw()
    assert collected and max(collected) <= heap.YOUNG_GENERATION
