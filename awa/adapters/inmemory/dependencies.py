"""The in-memory engine's job dependencies (ADR 0032): the edges and waits the Postgres
engines keep in ``awa.job_dependencies`` / ``awa.job_dependency_waits``, shared by every
side of a store, answering the same questions as ``awa.resolve_dependencies``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs

from awa.domain import batches
from awa.domain.batches import BatchCounts, MemberOutcome
from awa.domain.dependencies import DependentOutcome, OnParentFailure
from awa.ports.relations import DueEdges, EdgeCursor


@attrs.define
class DependencyBook:
    """Edges (child -> parent -> satisfied at), the children of each parent, and the
    count of unsatisfied parents of each waiting child. Mutate only a :meth:`copy`."""

    parents: dict[int, dict[int, datetime | None]] = attrs.field(factory=dict)
    children: dict[int, tuple[int, ...]] = attrs.field(factory=dict)
    waits: dict[int, int] = attrs.field(factory=dict)
    #: Each edge's policy on the parent's failure, where it is not ``cancel``.
    policies: dict[tuple[int, int], OnParentFailure] = attrs.field(factory=dict)
    #: Edges (child, parent) through which the parent's failure doomed the child, and
    #: when (``awa.job_dependencies.failed_at``).
    failed: dict[tuple[int, int], datetime] = attrs.field(factory=dict)
    #: How the parent ended on each ``run`` edge its failure resolved (ADR 0035), as
    #: ``awa.job_dependencies.parent_outcome``.
    outcomes: dict[tuple[int, int], MemberOutcome] = attrs.field(factory=dict)
    #: The batches (``awa.batches``): each callback's size, and the counts stored when
    #: its edges were pruned, with when (``counted_at``).
    batches: dict[int, int] = attrs.field(factory=dict)
    counted: dict[int, tuple[BatchCounts, datetime]] = attrs.field(factory=dict)

    def copy(self) -> DependencyBook:
        return DependencyBook(
            parents={child: dict(edges) for child, edges in self.parents.items()},
            children=dict(self.children),
            waits=dict(self.waits),
            policies=dict(self.policies),
            failed=dict(self.failed),
            outcomes=dict(self.outcomes),
            batches=dict(self.batches),
            counted=dict(self.counted),
        )

    def clear(self) -> None:
        self.parents.clear()
        self.children.clear()
        self.waits.clear()
        self.policies.clear()
        self.failed.clear()
        self.outcomes.clear()
        self.batches.clear()
        self.counted.clear()

    def policy(self, child: int, parent: int) -> OnParentFailure:
        return self.policies.get((child, parent), OnParentFailure.CANCEL)

    def record(
        self,
        child: int,
        parents: Iterable[int],
        satisfied: frozenset[int],
        now: datetime,
        policies: Iterable[OnParentFailure] = (),
        batch_size: int | None = None,
    ) -> None:
        """Store ``child``'s edges (with each parent's failure policy, aligned with
        ``parents``; none given: ``cancel``); it waits while any parent is not in
        ``satisfied``. ``batch_size``: ``child`` is a batch's callback of that size."""
        if batch_size is not None:
            self.batches[child] = batch_size
        edges = {parent: (now if parent in satisfied else None) for parent in parents}
        for parent, policy in zip(edges, policies, strict=False):
            if policy is not OnParentFailure.CANCEL:
                self.policies[(child, parent)] = policy
        self.parents[child] = edges
        for parent in edges:
            self.children[parent] = (*self.children.get(parent, ()), child)
        pending = sum(1 for at in edges.values() if at is None)
        if pending:
            self.waits[child] = pending

    def unresolved(self, child: int, parent: int) -> bool:
        """Whether ``child`` still waits on ``parent``: an edge neither satisfied nor
        failed."""
        edges = self.parents.get(child, {})
        return parent in edges and edges[parent] is None and (child, parent) not in self.failed

    def waited_on(self, parents: Iterable[int]) -> set[int]:
        """Of ``parents``, those a child still waits on, as ``awa.dependency_waited_on``."""
        return {
            parent
            for parent in parents
            if any(self.unresolved(child, parent) for child in self.children.get(parent, ()))
        }

    def resolve(
        self,
        completed: Iterable[int],
        failed: Iterable[int],
        now: datetime,
        cancelled: Iterable[int] = (),
    ) -> list[tuple[int, DependentOutcome]]:
        """As ``awa.resolve_dependencies``: children released by completed parents, then
        each edge from a failed parent applies its policy, transitively through the
        children it dooms; a ``run`` edge so resolved records how its parent ended
        (``cancelled`` names those of ``failed`` that were cancelled)."""
        failed = list(failed)
        gone = set(cancelled)
        answered: list[tuple[int, DependentOutcome]] = []
        for parent in completed:
            for child in self.children.get(parent, ()):
                edges = self.parents[child]
                if edges.get(parent, now) is not None:
                    continue
                edges[parent] = now
                pending = self.waits.get(child)
                if pending is None:
                    continue
                if pending <= 1:
                    del self.waits[child]
                    answered.append((child, DependentOutcome.RELEASED))
                else:
                    self.waits[child] = pending - 1
        # Unresolved edges the failures reach, followed through each child an edge
        # dooms (cancel or dlq); a 'run' edge stops there, and an edge that doomed its
        # child before is not walked again.
        hit: list[tuple[int, int, OnParentFailure]] = []
        frontier = list(failed)
        seen: set[int] = set()
        while frontier:
            parent = frontier.pop()
            for child in self.children.get(parent, ()):
                if not self.unresolved(child, parent):
                    continue
                policy = self.policy(child, parent)
                hit.append((child, parent, policy))
                if policy is not OnParentFailure.RUN and child not in seen:
                    seen.add(child)
                    frontier.append(child)
        doomed = {child for child, _, policy in hit if policy is not OnParentFailure.RUN}
        dead = {child for child, _, policy in hit if policy is OnParentFailure.DLQ}
        for child, parent, policy in hit:
            if policy is not OnParentFailure.RUN:
                self.failed.setdefault((child, parent), now)
        for child in sorted(doomed):
            if self.waits.pop(child, None) is not None:
                words = {policy for c, _, policy in hit if c == child}
                for policy in sorted(words - {OnParentFailure.RUN}):
                    answered.append(
                        (
                            child,
                            DependentOutcome.DEAD_LETTERED
                            if policy is OnParentFailure.DLQ
                            else DependentOutcome.DOOMED,
                        )
                    )
        # 'run' edges count as done, those of children doomed here too (each edge from a
        # finished parent is resolved); only a child not doomed counts down.
        for child, parent, policy in hit:
            if policy is not OnParentFailure.RUN:
                continue
            if self.parents[child][parent] is not None:
                continue
            self.parents[child][parent] = now
            self.outcomes[(child, parent)] = (
                MemberOutcome.CANCELLED
                if parent in gone
                else MemberOutcome.FAILED
                if parent in failed or parent in dead
                else MemberOutcome.CANCELLED
            )
            pending = self.waits.get(child)
            if pending is None:
                continue
            if pending <= 1:
                del self.waits[child]
                answered.append((child, DependentOutcome.RELEASED))
            else:
                self.waits[child] = pending - 1
        return answered

    def outcome(self, child: int, parent: int) -> MemberOutcome | None:
        """How ``parent`` ended as the edge from ``child`` records it: completed when
        satisfied with no failure recorded, ``None`` while it has not finished."""
        recorded = self.outcomes.get((child, parent))
        if recorded is not None:
            return recorded
        if self.parents.get(child, {}).get(parent) is not None:
            return MemberOutcome.COMPLETED
        return None

    def retried(self, job_ids: Iterable[int], restored: Iterable[int]) -> list[int]:
        """As ``awa.dependency_retried``: wait again for the ``restored`` jobs (counting
        their unsatisfied edges), clear the failure marks of ``job_ids``' edges, and
        answer the children left with none, in id order."""
        for child in restored:
            pending = sum(1 for at in self.parents.get(child, {}).values() if at is None)
            if pending and child not in self.waits:
                self.waits[child] = pending
        cleared: set[int] = set()
        for parent in job_ids:
            for child in self.children.get(parent, ()):
                if (child, parent) in self.failed:
                    del self.failed[(child, parent)]
                    cleared.add(child)
        return sorted(
            child
            for child in cleared
            if not any((child, parent) in self.failed for parent in self.parents[child])
        )

    def counts(self, child: int) -> BatchCounts:
        """How ``child``'s parents ended: from its edges, or, once they were pruned, the
        counts stored then (``awa.batches``)."""
        edges = self.parents.get(child)
        if not edges and child in self.counted:
            return self.counted[child][0]
        return batches.counts(self.outcome(child, parent) for parent in edges or {})

    def resolved_at(self, child: int, parent: int) -> datetime | None:
        """When the edge was resolved: its parent completed (or failed through a ``run``
        edge) or its failure doomed the child; ``None`` while unresolved."""
        return self.parents[child][parent] or self.failed.get((child, parent))

    def due_children(self, *, before: datetime, after: EdgeCursor | None, limit: int) -> DueEdges:
        """As ``awa.job_dependencies``' page for the retention duty: the next ``limit``
        edges resolved before ``before`` after ``after`` in (resolved, child) order, and
        of their children those whose every edge was resolved before ``before``."""
        resolved = sorted(
            {
                EdgeCursor(at, child)
                for child, edges in self.parents.items()
                for parent in edges
                if (at := self.resolved_at(child, parent)) is not None and at < before
            }
        )
        page = [edge for edge in resolved if after is None or edge > after][:limit]
        if not page:
            return DueEdges(children=(), cursor=None, full=False)
        children = sorted({edge.child_id for edge in page})
        return DueEdges(
            children=tuple(
                child
                for child in children
                if all(
                    (at := self.resolved_at(child, parent)) is not None and at < before
                    for parent in self.parents[child]
                )
            ),
            cursor=page[-1],
            full=len(page) >= limit,
        )

    def prune(
        self, children: Iterable[int], *, before: datetime, batches_of: Iterable[int], now: datetime
    ) -> int:
        """Delete the edges of ``children`` (each still resolved before ``before``),
        storing the counts of those that are batches (known here, or named in
        ``batches_of``) first; answers how many edges went."""
        known = set(batches_of)
        pruned = 0
        for child in children:
            edges = self.parents.get(child)
            if not edges or not all(
                (at := self.resolved_at(child, parent)) is not None and at < before
                for parent in edges
            ):
                continue
            if child in self.batches or child in known:
                counted = self.counts(child)
                self.batches.setdefault(child, counted.size)
                self.counted.setdefault(child, (counted, now))
            for parent in edges:
                self.policies.pop((child, parent), None)
                self.failed.pop((child, parent), None)
                self.outcomes.pop((child, parent), None)
                rest = tuple(c for c in self.children.get(parent, ()) if c != child)
                if rest:
                    self.children[parent] = rest
                else:
                    self.children.pop(parent, None)
            pruned += len(edges)
            del self.parents[child]
            self.waits.pop(child, None)
        return pruned

    def prune_batches(self, *, before: datetime) -> int:
        """Forget the batches whose counts were stored before ``before``."""
        gone = [child for child, (_, at) in self.counted.items() if at < before]
        for child in gone:
            del self.counted[child]
            self.batches.pop(child, None)
        return len(gone)
