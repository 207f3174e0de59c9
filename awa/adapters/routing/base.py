"""State and plumbing of the routing engine: the engines it composes, the cached
transition state, the runtime's role and the units of work it hands out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, Literal, TypeVar

import attrs

from awa.domain.engine_notice import engine_notice
from awa.domain.errors import DatabaseError
from awa.domain.stripes import StripeRotor
from awa.domain.transition import (
    DEFAULT_SCHEMA,
    TransitionObservation,
    TransitionRole,
    TransitionState,
    TransitionStatus,
    capability_for_role,
)
from awa.ports.clock import Clock
from awa.ports.leader import LeaderLock
from awa.ports.maintenance import RingMaintenance
from awa.ports.notifier import Subscription
from awa.ports.producers import CopyEnqueue, RouteCheckedEnqueue, RoutedInsert
from awa.ports.routing import HomeEngine, TargetEngine
from awa.ports.storage import StorageEngine, UnitOfWork, WorkerWarmUp
from awa.ports.transactions import SharedTransactions
from awa.ports.transition import TransitionStore

#: How long a claim loop trusts the cached state before reading it again.
DEFAULT_REFRESH_INTERVAL = 1.0

log = logging.getLogger("awa.adapters.routing")

Owner = Literal["canonical", "queue_storage"]
C = TypeVar("C")
T = TypeVar("T")


class RoutingUnitOfWork(Generic[C]):
    """A transaction of the shared store; the engine it writes to is decided by the state
    read inside it."""

    def __init__(self, owner: object, conn: C) -> None:
        self.owner = owner
        self.conn = conn
        self.open = True


@attrs.frozen
class Target(Generic[C]):
    """The queue-storage engine of one schema and the extras it has."""

    engine: TargetEngine[C]
    copy: CopyEnqueue | None
    routed: RouteCheckedEnqueue | None
    ring: RingMaintenance | None
    warm: WorkerWarmUp | None

    @classmethod
    def of(cls, engine: TargetEngine[C]) -> Target[C]:
        return cls(
            engine,
            copy=engine if isinstance(engine, CopyEnqueue) else None,
            routed=engine if isinstance(engine, RouteCheckedEnqueue) else None,
            ring=engine if isinstance(engine, RingMaintenance) else None,
            warm=engine if isinstance(engine, WorkerWarmUp) else None,
        )


@attrs.frozen
class Route(Generic[C]):
    """Where a producer's transaction writes: a unit of work on it, and the target when
    that is queue storage (``None``: canonical)."""

    uow: UnitOfWork
    target: Target[C] | None


class RoutingBase(Generic[C]):
    """The composed engines, the transition state (cached for the hot paths, for
    ``refresh_interval`` seconds of ``clock``) and the runtime's role. ``C`` is the shared
    store's transaction handle."""

    def __init__(
        self,
        *,
        canonical: HomeEngine[C],
        queue_storage: Callable[[str], TargetEngine[C]],
        transactions: SharedTransactions[C],
        transition: TransitionStore[C],
        clock: Clock,
        routed_insert: RoutedInsert | None = None,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._canonical = canonical
        self._make_queue_storage = queue_storage
        self._targets: dict[str, Target[C]] = {}
        self._tx = transactions
        self._transition = transition
        self._routed_insert = routed_insert
        self._refresh_interval = refresh_interval
        self._clock = clock
        self._on_close = on_close
        self._status: TransitionStatus | None = None
        self._status_read_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._role = TransitionRole.AUTO
        # Which engine each attempt claimed here came from, until the attempt closes.
        self._owners: dict[int, Owner] = {}
        # Where the next striped batch starts (see awa.domain.stripes.stripe_specs).
        self._stripe_rotor = StripeRotor()
        # The queue-storage schema the last route read sent producers to: inserts without
        # a unique key go there in one round trip, behind an in-transaction route check.
        self._producer_hint: str | None = None
        self._route_known = False
        self._routed_inserts = True
        # The schemas whose engine prepared for routed inserts (warm_routed), once each.
        self._warmed_routes: set[str] = set()
        self._closed = False

    # ---------------------------------------------------------------- engines
    @property
    def canonical(self) -> HomeEngine[C]:
        """The canonical engine (it shares this engine's store)."""
        return self._canonical

    def queue_storage(self, schema: str = DEFAULT_SCHEMA) -> TargetEngine[C]:
        """The queue-storage engine of ``schema`` (it shares this engine's store)."""
        return self._target(schema).engine

    def _target(self, schema: str) -> Target[C]:
        target = self._targets.get(schema)
        if target is None:
            target = self._targets[schema] = Target.of(self._make_queue_storage(schema))
        return target

    def _engine(self, owner: Owner, status: TransitionStatus) -> StorageEngine:
        if owner == "canonical":
            return self._canonical
        return self.queue_storage(status.schema)

    def _read_order(self, status: TransitionStatus) -> list[StorageEngine]:
        """Engines that may hold a job, the likelier first."""
        if status.state is TransitionState.ACTIVE:
            return [self.queue_storage(status.schema), self._canonical]
        if status.state is TransitionState.MIXED_TRANSITION:
            return [self._canonical, self.queue_storage(status.schema)]
        return [self._canonical]

    def _producer_engine(self, status: TransitionStatus) -> StorageEngine:
        schema = status.producer_schema
        return self._canonical if schema is None else self.queue_storage(schema)

    def _dlq_engine(self, status: TransitionStatus) -> StorageEngine:
        # Schema awa shares awa.dlq_entries between the engines; re-enqueued DLQ jobs must
        # go where producers write, so the producers' engine owns the DLQ.
        return self._producer_engine(status)

    # ---------------------------------------------------------------- transition state
    @property
    def transition_role(self) -> TransitionRole:
        return self._role

    @property
    def storage_capability(self) -> str:
        """What a runtime on this engine reports in ``awa.runtime_instances``."""
        return capability_for_role(self._role).value

    async def bind_transition_role(self, role: TransitionRole | str) -> TransitionStatus:
        """Fix the role of the runtime using this engine and, for a runtime that can run
        queue storage, move a fresh install straight to ``active``. Returns the state."""
        self._role = TransitionRole(role)
        if (
            self._role is not TransitionRole.CANONICAL_DRAIN
            and await self._transition.activate_if_fresh()
        ):
            log.warning(
                "storage engine switched from canonical to queue storage (schema awa): "
                "this database held no jobs, DLQ entries or live runtimes, so it needed "
                "no staged transition; `awa storage status` shows the state"
            )
        status = await self.status(max_age=0.0)
        notice = engine_notice(status, self._role)
        log.log(logging.WARNING if notice.canonical else logging.INFO, "%s", notice.text)
        return status

    async def status(self, *, max_age: float | None = None) -> TransitionStatus:
        """The transition status, re-read when older than ``max_age`` seconds (default:
        the refresh interval)."""
        limit = self._refresh_interval if max_age is None else max_age
        now = self._clock.monotonic()
        if self._status is None or now - self._status_read_at >= limit:
            status = await self._transition.read_status()
            self._status, self._status_read_at = status, now
            return status
        return self._status

    async def observe_transition(self) -> TransitionObservation:
        """:class:`~awa.ports.storage.TransitionObserver`."""
        return await self._transition.observe_transition()

    async def _hot_status(self) -> TransitionStatus:
        """The status for the claim and completion paths: the cached one, re-read in the
        background once older than the refresh interval (waits only when nothing is cached
        yet or the interval is zero)."""
        status = self._status
        if status is None or self._refresh_interval <= 0:
            return await self.status()
        if self._clock.monotonic() - self._status_read_at >= self._refresh_interval and (
            self._refreshing is None or self._refreshing.done()
        ):
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh_status())
        return status

    async def _refresh_status(self) -> None:
        try:
            await self.status(max_age=0.0)
        except Exception:
            # The next claim past the interval tries again; until then the cache stands.
            log.debug("background transition status refresh failed", exc_info=True)

    # ---------------------------------------------------------------- units of work
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[RoutingUnitOfWork[C]]:
        """A unit of work on one transaction of the store: commit on exit, roll back on
        error."""
        if self._closed:
            raise DatabaseError("the storage engine is closed")
        async with self._tx.transaction() as conn:
            uow = RoutingUnitOfWork(self, conn)
            try:
                yield uow
            finally:
                uow.open = False

    def unit_of_work_for(self, conn: C) -> RoutingUnitOfWork[C]:
        """Wrap a caller's transaction (a connection already inside one)."""
        return RoutingUnitOfWork(self, conn)

    def _own_uow(self, uow: UnitOfWork) -> RoutingUnitOfWork[C]:
        if not isinstance(uow, RoutingUnitOfWork) or uow.owner is not self:
            raise DatabaseError("the unit of work does not belong to this engine")
        if not uow.open:
            raise DatabaseError("the unit of work is already closed")
        return uow

    async def _route(self, conn: C) -> Route[C]:
        """Where new jobs go (and a unit of work on ``conn`` there), decided inside
        ``conn``'s transaction under the producers' lock."""
        schema = await self._transition.producer_schema(conn)
        self._producer_hint, self._route_known = schema, True
        if schema is None:
            return Route(self._canonical.unit_of_work_for(conn), None)
        target = self._target(schema)
        return Route(target.engine.unit_of_work_for(conn), target)

    # ---------------------------------------------------------------- lifecycle
    async def subscribe(self, channels: list[str]) -> Subscription:
        """Listen on ``channels`` (both engines notify alike, through the shared store)."""
        return await self._canonical.subscribe(channels)

    def leader_lock(self) -> LeaderLock:
        """A new candidate for the cluster's maintenance leadership."""
        return self._canonical.leader_lock()

    async def reset(self) -> None:
        """Delete every job of both engines, DLQ entries, unique claims and queue settings."""
        status = await self.status(max_age=0.0)
        await self._canonical.reset()
        if await self._transition.queue_storage_installed(status.schema):
            await self.queue_storage(status.schema).reset()
        self._owners.clear()

    async def close(self) -> None:
        """Stop the background refresh, then release what the composition handed over
        (``on_close``: the queue-storage engines and the shared store)."""
        if self._closed:
            return
        self._closed = True
        refreshing, self._refreshing = self._refreshing, None
        if refreshing is not None and not refreshing.done():
            refreshing.cancel()
            await asyncio.wait([refreshing])
        if self._on_close is not None:
            await self._on_close()
