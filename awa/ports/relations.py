"""Reads that span every job of a backend, for the operator surfaces (CLI, REST, UI):
a job's dependency edges (ADR 0032), how a batch's jobs ended (ADR 0035) and the load
on each concurrency key of a queue (ADR 0029); and the retention of the edges and of
the batches' stored counts (the maintenance leader's duty).

Both Postgres engines keep their edges in one table and show their jobs through one
view (``awa.jobs``), so one adapter answers for both; the in-memory backend reads its
store. States are read through the storage engine, not here: an edge names jobs only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import attrs

from awa.domain.batches import BatchCounts


@attrs.frozen
class Edge:
    """One dependency edge seen from one of its ends: the job at the other end, when the
    parent completed (``satisfied_at``), whether the parent's failure doomed the child
    through it (``failed``) and the child's policy on that failure (``on_failure``)."""

    job_id: int
    satisfied_at: datetime | None
    failed: bool
    on_failure: str


@attrs.frozen
class JobEdges:
    """A job's parents and children (each list ordered by job id, at most the limit
    asked for) and how many there are in all."""

    parents: tuple[Edge, ...]
    children: tuple[Edge, ...]
    parent_count: int
    child_count: int


@attrs.frozen
class KeyLoad:
    """One concurrency key of a queue: its attempts holding a slot (``running``) and its
    jobs ready to run that wait for one (``waiting``)."""

    key: str
    running: int
    waiting: int


@attrs.frozen(order=True)
class EdgeCursor:
    """Where the retention duty's walk of the resolved edges stands: the last edge read,
    by when it was resolved and its child (the walk's order)."""

    resolved_at: datetime
    child_id: int


@attrs.frozen
class DueEdges:
    """One page of the retention duty's walk (:meth:`JobRelations.due_edge_children`):
    the children named by the page's edges whose every edge was resolved before the
    cutoff (lowest id first), the page's last edge (``None``: the page was empty) and
    whether the page was full (more may follow)."""

    children: tuple[int, ...]
    cursor: EdgeCursor | None
    full: bool


@runtime_checkable
class JobRelations(Protocol):
    async def parent_counts(self, job_id: int) -> BatchCounts:
        """How the parents of ``job_id`` ended, as its edges record them (ADR 0035):
        completed (the edge satisfied with no failure recorded), failed or cancelled (a
        ``run`` edge a failure resolved), the rest not finished; all zero for a job with
        no parents or an unknown id. A batch's progress is its callback's."""
        ...

    async def batch_counts(self, batch_id: int) -> BatchCounts | None:
        """As :meth:`parent_counts` for a batch's callback; ``None`` when no batch has
        the id (``awa.batches``), whether or not its callback's row is still stored."""
        ...

    async def due_edge_children(
        self, *, before: datetime, after: EdgeCursor | None, limit: int
    ) -> DueEdges:
        """The next page of the retention duty's walk: at most ``limit`` edges resolved
        before ``before`` and after ``after`` (``None``: from the oldest), oldest
        resolution first, and of the children they name those whose every edge was
        resolved before ``before`` (candidates; the duty checks through the storage
        engine that the child itself finished). Reads only edges resolved before the
        cutoff, never the whole table."""
        ...

    async def prune_edges(
        self,
        children: Sequence[int],
        *,
        before: datetime,
        batches_of: Sequence[int] = (),
        now: datetime,
    ) -> int:
        """Delete the edges of ``children`` whose every edge is still resolved before
        ``before`` (ADR 0032 retention); a batch among them (known to the backend, or
        named in ``batches_of``) has its counts stored first, at ``now``, so
        :meth:`parent_counts` and :meth:`batch_counts` still answer them. Answers how
        many edges went."""
        ...

    async def prune_batches(self, *, before: datetime) -> int:
        """Forget the batches whose counts were stored (their edges pruned) before
        ``before``; answers how many."""
        ...

    async def job_edges(self, job_id: int, *, limit: int) -> JobEdges:
        """The parents and children of ``job_id``, at most ``limit`` of each (lowest ids
        first); empty for a job with neither, or an unknown id."""
        ...

    async def key_loads(
        self,
        queue: str,
        *,
        running_states: Sequence[str],
        waiting_states: Sequence[str],
        limit: int,
    ) -> list[KeyLoad]:
        """The concurrency keys of ``queue`` with a job in ``running_states`` or
        ``waiting_states`` (counted as running / waiting), the busiest first (running
        plus waiting, then key), at most ``limit``."""
        ...

    async def running_of_keys(
        self, queue: str, keys: Sequence[str], *, running_states: Sequence[str]
    ) -> dict[str, int]:
        """How many jobs of each of ``keys`` on ``queue`` are in ``running_states`` (the
        slots each key holds); a key with none is absent. One read for every key."""
        ...
