"""The :class:`~awa.ports.relations.JobRelations` port in memory: edges from the store's
dependency book, key loads from the jobs of every side of the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from awa.adapters.inmemory.store import SharedStore
from awa.domain.batches import BatchCounts
from awa.domain.flow_control import concurrency_key_of
from awa.ports.relations import DueEdges, Edge, EdgeCursor, JobEdges, KeyLoad


class InMemoryJobRelations:
    """Reads of the committed state of ``store``."""

    def __init__(self, store: SharedStore) -> None:
        self._store = store

    async def job_edges(self, job_id: int, *, limit: int) -> JobEdges:
        deps = self._store.state.deps
        parents = sorted(deps.parents.get(job_id, {}).items())
        children = sorted(set(deps.children.get(job_id, ())))
        return JobEdges(
            parents=tuple(
                Edge(
                    job_id=parent,
                    satisfied_at=at,
                    failed=(job_id, parent) in deps.failed,
                    on_failure=str(deps.policy(job_id, parent)),
                )
                for parent, at in parents[:limit]
            ),
            children=tuple(
                Edge(
                    job_id=child,
                    satisfied_at=deps.parents[child].get(job_id),
                    failed=(child, job_id) in deps.failed,
                    on_failure=str(deps.policy(child, job_id)),
                )
                for child in children[:limit]
            ),
            parent_count=len(parents),
            child_count=len(children),
        )

    async def parent_counts(self, job_id: int) -> BatchCounts:
        return self._store.state.deps.counts(job_id)

    async def batch_counts(self, batch_id: int) -> BatchCounts | None:
        deps = self._store.state.deps
        return deps.counts(batch_id) if batch_id in deps.batches else None

    async def due_edge_children(
        self, *, before: datetime, after: EdgeCursor | None, limit: int
    ) -> DueEdges:
        return self._store.state.deps.due_children(before=before, after=after, limit=limit)

    async def prune_edges(
        self,
        children: Sequence[int],
        *,
        before: datetime,
        batches_of: Sequence[int] = (),
        now: datetime,
    ) -> int:
        store = self._store
        async with store.lock:
            # The committed state is never changed in place: commit a copy.
            copy = store.state.copy()
            pruned = copy.deps.prune(children, before=before, batches_of=batches_of, now=now)
            store.state = copy
        return pruned

    async def prune_batches(self, *, before: datetime) -> int:
        store = self._store
        async with store.lock:
            copy = store.state.copy()
            pruned = copy.deps.prune_batches(before=before)
            store.state = copy
        return pruned

    async def key_loads(
        self,
        queue: str,
        *,
        running_states: Sequence[str],
        waiting_states: Sequence[str],
        limit: int,
    ) -> list[KeyLoad]:
        running: Counter[str] = Counter()
        waiting: Counter[str] = Counter()
        for jobs in self._store.state.sides.values():
            for job in jobs.values():
                key = concurrency_key_of(job.metadata)
                if key is None or job.queue != queue:
                    continue
                if str(job.state) in running_states:
                    running[key] += 1
                elif str(job.state) in waiting_states:
                    waiting[key] += 1
        keys = sorted(set(running) | set(waiting), key=lambda k: (-(running[k] + waiting[k]), k))
        return [KeyLoad(key, running[key], waiting[key]) for key in keys[:limit]]

    async def running_of_keys(
        self, queue: str, keys: Sequence[str], *, running_states: Sequence[str]
    ) -> dict[str, int]:
        wanted = set(keys)
        running: Counter[str] = Counter()
        for jobs in self._store.state.sides.values():
            for job in jobs.values():
                key = concurrency_key_of(job.metadata)
                if key is None or key not in wanted or job.queue != queue:
                    continue
                if str(job.state) in running_states:
                    running[key] += 1
        return dict(running)
