"""The operator reads across a backend's jobs (``awa.ports.relations``) on every engine:
a job's parents and children as stored edges (satisfied when the parent completed,
failed when its failure doomed the child, with the child's policy), and per queue the
concurrency keys with how many of each key run and how many wait."""

from __future__ import annotations

import pytest

from awa.domain.dependencies import OnParentFailure
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.ports.storage import Ack
from tests.contract._support import QUEUE, claim_one, enqueue, spec
from tests.support.engines import EngineHandle

pytestmark = pytest.mark.anyio

RUNNING = ("running", "waiting_external")
WAITING = ("available",)


async def test_edges_read_from_both_ends(engine: EngineHandle) -> None:
    first = await enqueue(engine, "parent_step")
    second = await enqueue(engine, "parent_step")
    (child,) = await engine.engine.enqueue_many(
        [
            spec(
                "child_step",
                queue="relations_steps",
                depends_on=(first.id, second.id),
                on_parent_failure=("cancel", str(OnParentFailure.RUN)),
            )
        ]
    )
    relations = engine.control.relations

    claim = await claim_one(engine)
    assert claim.job.id == first.id
    assert await engine.engine.complete([claim.lease]) == [Ack.APPLIED]

    edges = await relations.job_edges(child.id, limit=10)
    assert (edges.parent_count, edges.child_count, edges.children) == (2, 0, ())
    assert [e.job_id for e in edges.parents] == [first.id, second.id]
    done, waiting = edges.parents
    assert done.satisfied_at is not None and not done.failed and done.on_failure == "cancel"
    assert waiting.satisfied_at is None and waiting.on_failure == "run"

    up = await relations.job_edges(first.id, limit=10)
    assert (up.parent_count, up.child_count, up.parents) == (0, 1, ())
    assert up.children[0].job_id == child.id and up.children[0].satisfied_at is not None

    capped = await relations.job_edges(child.id, limit=1)
    assert ([e.job_id for e in capped.parents], capped.parent_count) == ([first.id], 2)
    assert await relations.job_edges(999_999_999, limit=10) == type(edges)((), (), 0, 0)


async def test_a_failed_parent_marks_the_edge_that_doomed_the_child(engine: EngineHandle) -> None:
    parent = await enqueue(engine, "parent_step", max_attempts=1)
    (child,) = await engine.engine.enqueue_many(
        [spec("child_step", queue="relations_steps", depends_on=(parent.id,))]
    )
    claim = await claim_one(engine)
    assert await engine.engine.fail(claim.lease, error="boom") == Ack.APPLIED
    (edge,) = (await engine.control.relations.job_edges(child.id, limit=10)).parents
    assert (edge.job_id, edge.failed, edge.satisfied_at) == (parent.id, True, None)


async def test_key_loads_count_running_and_waiting_per_key(engine: EngineHandle) -> None:
    for key, count in (("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 2)):
        for _ in range(count):
            await enqueue(engine, metadata={CONCURRENCY_KEY_METADATA: key})
    await enqueue(engine)  # no key: not listed
    await enqueue(engine, queue="elsewhere", metadata={CONCURRENCY_KEY_METADATA: "tenant-a"})
    claims = await engine.engine.claim(QUEUE, limit=10, max_running_per_key=1)
    assert len(claims) == 4  # one of each key, and the keyless job
    relations = engine.control.relations

    loads = await relations.key_loads(
        QUEUE, running_states=RUNNING, waiting_states=WAITING, limit=10
    )
    assert [(k.key, k.running, k.waiting) for k in loads] == [
        ("tenant-a", 1, 2),
        ("tenant-c", 1, 1),
        ("tenant-b", 1, 0),
    ]
    top = await relations.key_loads(QUEUE, running_states=RUNNING, waiting_states=WAITING, limit=1)
    assert [k.key for k in top] == ["tenant-a"]

    done = [c for c in claims if c.job.metadata.get(CONCURRENCY_KEY_METADATA) == "tenant-b"]
    assert await engine.engine.complete([done[0].lease]) == [Ack.APPLIED]
    after = await relations.key_loads(
        QUEUE, running_states=RUNNING, waiting_states=WAITING, limit=10
    )
    assert "tenant-b" not in [k.key for k in after]
    assert (
        await relations.key_loads(
            "no_such_queue", running_states=RUNNING, waiting_states=WAITING, limit=10
        )
        == []
    )
