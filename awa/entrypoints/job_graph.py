"""What the operator surfaces show of a job's place in a workflow and of a queue's
concurrency keys: one shape for ``awa job get``, ``awa queue keys``, the admin API and
the admin pages (ADR 0031: the API keeps the CLI's shapes).

Edges come from the backend's :class:`~awa.ports.relations.JobRelations`; each related
job's state is read through the storage engine, as every other read of a job is."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from awa.domain import batches
from awa.domain.errors import ValidationError
from awa.domain.flow_control import SLOT_STATES, held_back
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.domain.validation import validate_job_id
from awa.entrypoints.held_back import limits_in_force
from awa.entrypoints.job import rfc3339

if TYPE_CHECKING:
    from awa.entrypoints.client import AsyncClient
    from awa.ports.relations import Edge
    from awa.ports.storage import StorageEngine

#: The most parents and the most children listed for one job.
EDGE_LIMIT = 100
#: The most jobs a workflow graph gathers around one job.
GRAPH_LIMIT = 200
#: How many keys ``awa queue keys`` and the queue page list by default (the busiest).
KEY_LIMIT = 20
#: The most keys one request may ask for.
MAX_KEY_LIMIT = 1000
#: A keyed job in these states waits for a slot of its key (ready, held back only by
#: the limit); the states holding a slot are the rule's own (``SLOT_STATES``).
KEY_WAITING_STATES = frozenset({JobState.Available})


async def _stored(engine: StorageEngine, job_id: int) -> tuple[JobRecord | None, bool]:
    """The job's row, or its DLQ entry's (then ``True``), or ``None``."""
    record = await engine.get_job(job_id)
    if record is None:
        entry = await engine.get_dlq(job_id)
        if entry is not None:
            return entry.job, True
    return record, False


async def _job_summary(engine: StorageEngine, job_id: int) -> dict[str, Any]:
    """``id``, ``kind``, ``queue``, ``state`` of a job; a dead-lettered one reads as
    ``failed`` with ``dlq`` true; a job no longer stored has ``state`` ``None``."""
    record, dlq = await _stored(engine, job_id)
    if record is None:
        return {"id": job_id, "kind": None, "queue": None, "state": None, "dlq": False}
    state = "failed" if dlq else str(record.state)
    return {"id": job_id, "kind": record.kind, "queue": record.queue, "state": state, "dlq": dlq}


def _edge(summary: dict[str, Any], edge: Edge) -> dict[str, Any]:
    return {
        **summary,
        "satisfied_at": rfc3339(edge.satisfied_at),
        "failed": edge.failed,
        "on_failure": edge.on_failure,
    }


def batch_json(counts: batches.BatchCounts) -> dict[str, Any]:
    """A batch's progress as ``awa batch show --json`` and ``GET /api/batches/{id}``
    answer it: ``batch_id`` (its callback's id), ``callback_state`` (``None`` once its
    row is gone), the counts and ``finished`` (nothing pending)."""
    return {
        "batch_id": counts.callback_id,
        "callback_state": None if counts.callback_state is None else str(counts.callback_state),
        **counts.as_dict(),
        "finished": counts.finished,
    }


async def job_relations(client: AsyncClient, job_id: int) -> dict[str, Any] | None:
    """A job's parents and children with their states, how many parents it still waits
    on, its stored result (``result.stored`` false when none is stored) and, for a
    batch's callback, the batch's progress (``batch``: ``size``, ``completed``,
    ``failed``, ``cancelled``, ``pending``; ``None`` for any other job; ADR 0035);
    ``None`` when there is no such job (nor a DLQ entry for it)."""
    job_id = validate_job_id(job_id)
    engine = await client.admin_engine()
    control = await client.admin_control_plane()
    record, dlq = await _stored(engine, job_id)
    if record is None:
        return None
    batch = (
        (await control.relations.parent_counts(job_id)).as_dict()
        if batches.is_callback(record.metadata)
        else None
    )
    edges = await control.relations.job_edges(job_id, limit=EDGE_LIMIT)
    parents = [_edge(await _job_summary(engine, e.job_id), e) for e in edges.parents]
    children = [_edge(await _job_summary(engine, e.job_id), e) for e in edges.children]
    stored = await control.results.get_result(job_id)
    return {
        "job_id": job_id,
        "state": "failed" if dlq else str(record.state),
        "batch": batch,
        "waiting_on": sum(1 for e in edges.parents if e.satisfied_at is None and not e.failed),
        "parent_count": edges.parent_count,
        "child_count": edges.child_count,
        "parents": parents,
        "children": children,
        "result": {"stored": False}
        if stored is None
        else {
            "stored": True,
            "value": stored.value,
            "stored_at": rfc3339(stored.stored_at),
            "expires_at": rfc3339(stored.expires_at),
        },
    }


async def workflow_graph(client: AsyncClient, job_id: int) -> dict[str, Any] | None:
    """The jobs connected to ``job_id`` through dependency edges (either way), at most
    ``GRAPH_LIMIT`` of them, gathered nearest first: ``nodes`` (each with its state and
    ``depth``, the longest chain of parents above it within the graph), ``edges`` as
    ``[parent, child]`` pairs, and ``truncated`` when more jobs are connected. ``None``
    when there is no such job."""
    job_id = validate_job_id(job_id)
    engine = await client.admin_engine()
    relations = (await client.admin_control_plane()).relations
    root = await _job_summary(engine, job_id)
    if root["state"] is None:
        return None
    nodes: dict[int, dict[str, Any]] = {job_id: root}
    pairs: set[tuple[int, int]] = set()
    queue: deque[int] = deque([job_id])
    truncated = False
    while queue:
        current = queue.popleft()
        edges = await relations.job_edges(current, limit=EDGE_LIMIT)
        if edges.parent_count > len(edges.parents) or edges.child_count > len(edges.children):
            truncated = True
        linked = [(e.job_id, current) for e in edges.parents]
        linked += [(current, e.job_id) for e in edges.children]
        for parent, child in linked:
            other = parent if child == current else child
            if other not in nodes:
                if len(nodes) >= GRAPH_LIMIT:
                    truncated = True
                    continue
                nodes[other] = await _job_summary(engine, other)
                queue.append(other)
            pairs.add((parent, child))
    depth = _depths(list(nodes), sorted(pairs))
    return {
        "job_id": job_id,
        "nodes": [{**nodes[n], "depth": depth[n]} for n in sorted(nodes)],
        "edges": [list(pair) for pair in sorted(pairs)],
        "truncated": truncated,
    }


def _depths(nodes: list[int], pairs: list[tuple[int, int]]) -> dict[int, int]:
    """Each node's longest chain of parents within the graph (0 for one with none)."""
    parents: dict[int, list[int]] = {n: [] for n in nodes}
    for parent, child in pairs:
        parents[child].append(parent)
    depth: dict[int, int] = {}

    def walk(node: int) -> int:
        # Iterative, so a chain of many steps does not exhaust the interpreter's stack.
        stack = [node]
        while stack:
            top = stack[-1]
            todo = [p for p in parents[top] if p not in depth]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            depth[top] = max((depth[p] + 1 for p in parents[top]), default=0)
        return depth[node]

    for node in nodes:
        walk(node)
    return depth


def key_limit(value: Any, field: str = "limit") -> int:
    """How many keys to list: an integer from 1 to ``MAX_KEY_LIMIT``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {value!r:.40}")
    if not 1 <= value <= MAX_KEY_LIMIT:
        raise ValidationError(field, f"must be from 1 to {MAX_KEY_LIMIT}, got {value}")
    return value


async def queue_keys(client: AsyncClient, queue: str, *, limit: int = KEY_LIMIT) -> dict[str, Any]:
    """A queue's concurrency keys, the busiest first (at most ``limit``): how many of each
    key's attempts hold a slot (``running``), how many of its ready jobs wait
    (``waiting``) and how many of those the per-key limit holds back now
    (``held_back``); and the limits in force on the queue (``max_running_per_key``, the
    per-process, fleet-wide and per-key rate limits), each from an operator's override
    or else from the queue config the live workers publish (``limit_sources``: which,
    ``None`` when neither sets it; workers that disagree show the smallest)."""
    limit = key_limit(limit)
    control = await client.admin_control_plane()
    loads = await control.relations.key_loads(
        queue,
        running_states=sorted(str(s) for s in SLOT_STATES),
        waiting_states=sorted(str(s) for s in KEY_WAITING_STATES),
        limit=limit,
    )
    limits, sources = await limits_in_force(control, queue)
    per_key = limits["max_running_per_key"]
    return {
        "queue": queue,
        "limits": limits,
        "limit_sources": sources,
        "keys": [
            {
                "key": load.key,
                "running": load.running,
                "waiting": load.waiting,
                "held_back": held_back(load.running, load.waiting, per_key),
            }
            for load in loads
        ],
    }
