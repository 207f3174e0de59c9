"""The in-memory engine's job dependencies (ADR 0032): the edges and waits the Postgres
engines keep in ``awa.job_dependencies`` / ``awa.job_dependency_waits``, shared by every
side of a store, answering the same questions as ``awa.resolve_dependencies``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs

from awa.domain.dependencies import DependentOutcome


@attrs.define
class DependencyBook:
    """Edges (child -> parent -> satisfied at), the children of each parent, and the
    count of unsatisfied parents of each waiting child. Mutate only a :meth:`copy`."""

    parents: dict[int, dict[int, datetime | None]] = attrs.field(factory=dict)
    children: dict[int, tuple[int, ...]] = attrs.field(factory=dict)
    waits: dict[int, int] = attrs.field(factory=dict)

    def copy(self) -> DependencyBook:
        return DependencyBook(
            parents={child: dict(edges) for child, edges in self.parents.items()},
            children=dict(self.children),
            waits=dict(self.waits),
        )

    def clear(self) -> None:
        self.parents.clear()
        self.children.clear()
        self.waits.clear()

    def record(
        self, child: int, parents: Iterable[int], satisfied: frozenset[int], now: datetime
    ) -> None:
        """Store ``child``'s edges; it waits while any parent is not in ``satisfied``."""
        edges = {parent: (now if parent in satisfied else None) for parent in parents}
        self.parents[child] = edges
        for parent in edges:
            self.children[parent] = (*self.children.get(parent, ()), child)
        pending = sum(1 for at in edges.values() if at is None)
        if pending:
            self.waits[child] = pending

    def resolve(
        self, completed: Iterable[int], failed: Iterable[int], now: datetime
    ) -> list[tuple[int, DependentOutcome]]:
        """As ``awa.resolve_dependencies``: children released by completed parents, then
        every job still waiting on a failed one, transitively."""
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
        frontier = list(failed)
        doomed: set[int] = set()
        while frontier:
            parent = frontier.pop()
            for child in self.children.get(parent, ()):
                if self.parents[child].get(parent) is None and child not in doomed:
                    doomed.add(child)
                    frontier.append(child)
        for child in sorted(doomed):
            if self.waits.pop(child, None) is not None:
                answered.append((child, DependentOutcome.DOOMED))
        return answered
