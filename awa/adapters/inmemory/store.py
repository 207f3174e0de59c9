"""The in-memory store: what in-memory engines over one "database" share.

A lone :class:`~awa.adapters.inmemory.InMemoryEngine` has a store of its own. Two engines
built on one store stand for the canonical and the queue-storage engine of one Postgres
database, as the routing engine composes them: each keeps its own jobs (its *side*), and
they share what the two Postgres engines share (ADR 0007): the id sequence, unique claims,
queue settings, DLQ entries, notifications and the leader lock, and where the storage
transition sends producers.
"""

from __future__ import annotations

from datetime import datetime

import anyio
import attrs

from awa.adapters.inmemory.dependencies import DependencyBook
from awa.adapters.inmemory.notifier import LeaderElection, NotificationHub
from awa.adapters.inmemory.state import EngineState, QueueMeta
from awa.domain.job import DlqEntry, JobRecord
from awa.domain.overrides import QueueOverrides
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.transition import TransitionStatus

#: The side of a lone engine, and of the canonical engine of a shared store.
CANONICAL_SIDE = "canonical"


def queue_storage_side(schema: str) -> str:
    """The side holding the jobs of the queue-storage engine of ``schema``."""
    return f"queue_storage:{schema}"


@attrs.define
class StoreState:
    """Every side's jobs plus the shared rows. Mutate only a :meth:`copy`."""

    sides: dict[str, dict[int, JobRecord]] = attrs.field(factory=dict)
    dlq: dict[int, DlqEntry] = attrs.field(factory=dict)
    unique: dict[bytes, int] = attrs.field(factory=dict)
    queues: dict[str, QueueMeta] = attrs.field(factory=dict)
    deps: DependencyBook = attrs.field(factory=DependencyBook)
    #: Fleet-wide rate limiters, shared by both sides as ``awa.rate_limiters`` is.
    rate_limiters: dict[tuple[str, str], tuple[datetime, GlobalRateLimit]] = attrs.field(
        factory=dict
    )

    def copy(self) -> StoreState:
        return StoreState(
            sides={side: dict(jobs) for side, jobs in self.sides.items()},
            dlq=dict(self.dlq),
            unique=dict(self.unique),
            queues=dict(self.queues),
            deps=self.deps.copy(),
            rate_limiters=dict(self.rate_limiters),
        )

    def view(self, side: str) -> EngineState:
        """What one engine sees: its side's jobs and the shared rows, by reference (so
        writes to a view of a copy land in that copy)."""
        jobs = self.sides.get(side)
        if jobs is None:
            jobs = self.sides[side] = {}
        return EngineState(
            jobs=jobs,
            dlq=self.dlq,
            unique=self.unique,
            queues=self.queues,
            deps=self.deps,
            rate_limiters=self.rate_limiters,
        )


class SharedStore:
    """The committed state, the write lock, the id sequence, notifications, the leader
    slot, the queue overrides and (for a store under a transition) the transition
    status."""

    def __init__(self) -> None:
        self.state = StoreState()
        self.lock = anyio.Lock()
        self.hub = NotificationHub()
        self.election = LeaderElection()
        self.next_id = 1
        #: Set by :class:`~awa.adapters.inmemory.transition.InMemoryTransition`.
        self.transition: TransitionStatus | None = None
        #: Live queue overrides by queue name (the ``override_*`` columns of
        #: ``awa.queue_meta``): a queue setting, so an engine's ``reset`` clears them.
        self.overrides: dict[str, QueueOverrides] = {}

    def committed(self, side: str) -> EngineState:
        """A read-only view of ``side`` in the committed state."""
        jobs = self.state.sides.get(side, {})
        return EngineState(
            jobs=jobs,
            dlq=self.state.dlq,
            unique=self.state.unique,
            queues=self.state.queues,
            deps=self.state.deps,
            rate_limiters=self.state.rate_limiters,
        )

    def producer_side(self) -> str | None:
        """Where the store itself routes an insert (``awa.insert_job_compat`` on Postgres,
        a cron fire here); ``None`` when no transition governs the store."""
        if self.transition is None:
            return None
        schema = self.transition.producer_schema
        return CANONICAL_SIDE if schema is None else queue_storage_side(schema)
