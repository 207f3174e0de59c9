"""Producers of the routing engine: every insert lands in the engine the transition state
names when it commits, read inside the inserting transaction."""

from __future__ import annotations

from collections.abc import Sequence

from awa.adapters.routing.base import C, Route, RoutingBase
from awa.domain.errors import UniqueConflict, ValidationError
from awa.domain.job import JobRecord, JobSpec
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES, stripe_specs
from awa.domain.validation import validate_spec
from awa.ports.producers import RouteChanged
from awa.ports.storage import UnitOfWork

COPY_NEEDS_QUEUE_STORAGE = (
    "enqueue_many_copy requires an active queue_storage backend; on canonical storage use "
    "insert_many_copy (or run `awa storage` to move to queue storage)"
)


class ProducerOps(RoutingBase[C]):
    """``enqueue_many`` and its skip-duplicates and bulk variants."""

    def _striped(
        self, route: Route[C], specs: Sequence[JobSpec], stripes: int
    ) -> Sequence[JobSpec]:
        """``specs`` as the routed engine stores them: renamed to their stripe on queue
        storage, unchanged on canonical (which has no stripes)."""
        if stripes <= 1 or route.target is None:
            return specs
        return stripe_specs(specs, stripes, self._stripe_rotor)

    async def _append(
        self, route: Route[C], specs: Sequence[JobSpec], *, checked: bool
    ) -> list[JobRecord]:
        """Enqueue ``specs`` where ``route`` says; ``checked``: every spec passed
        ``validate_spec`` as it stands (queue storage then does not check it again)."""
        if route.target is not None:
            return await route.target.engine.enqueue_many(specs, uow=route.uow, validated=checked)
        return await self._canonical.enqueue_many(specs, uow=route.uow)

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        """Enqueue ``specs``; with ``stripes > 1`` and queue storage as the route, each
        job goes to one stripe of its queue (``queue#k``). ``validated``: the caller already
        ran ``validate_spec`` on every spec (specs renamed to a stripe are checked again,
        their queue name being new)."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        # Renaming to a stripe makes a new queue name, which the engine checks.
        checked = stripes <= 1
        if not specs:
            return []
        if uow is None:
            hinted = await self._enqueue_hinted(specs, stripes, checked=checked)
            if hinted is not None:
                return hinted
            if (
                self._routed_insert is not None
                and len(specs) == 1
                and stripes <= 1
                and specs[0].unique_key is None
                and specs[0].run_at is None
                and not specs[0].depends_on
                # until a route read has told where producers write (below)
                and (self._route_known or not self._routed_inserts)
            ):
                return [await self._routed_insert.insert_routed(specs[0])]
            async with self._tx.transaction() as conn:
                route = await self._route(conn)
                records = await self._append(
                    route, self._striped(route, specs, stripes), checked=checked
                )
            # The route read may have named a queue storage for the first time.
            await self._warm_route()
            return records
        own = self._own_uow(uow)
        route = await self._route(own.conn)
        return await self._append(route, self._striped(route, specs, stripes), checked=checked)

    async def _warm_route(self) -> None:
        """The first time the route names a queue storage, let its engine prepare for
        the routed inserts to come (it plans the insert on a pooled connection), so they
        are not planned one by one on their callers' path. Run by the insert that read
        the route (already the slow one: it opened the pool and read the route), or else
        by the first routed insert."""
        hint = self._producer_hint
        if hint is None or hint in self._warmed_routes or not self._routed_inserts:
            return
        routed = self._target(hint).routed
        if routed is None:
            return
        self._warmed_routes.add(hint)
        await routed.warm_routed()

    async def _enqueue_hinted(
        self, specs: Sequence[JobSpec], stripes: int, *, checked: bool
    ) -> list[JobRecord] | None:
        """Insert straight into the queue storage the last route read named, behind the
        engine's own route check; ``None`` when there is no such hint or the route moved."""
        hint = self._producer_hint
        if hint is None or not self._routed_inserts:
            return None
        if any(spec.unique_key is not None or spec.depends_on for spec in specs):
            # Keys and parents are checked in a transaction of the route's engine.
            return None
        routed = self._target(hint).routed
        if routed is None:
            self._routed_inserts = False
            return None
        if stripes > 1:
            specs = stripe_specs(specs, stripes, self._stripe_rotor)
        await self._warm_route()
        try:
            return await routed.enqueue_many_routed(specs, validated=checked)
        except RouteChanged as changed:
            self._producer_hint, self._route_known = None, False
            self._routed_inserts = changed.supported
            return None

    async def enqueue_many_skip_duplicates(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        """Enqueue ``specs``, skipping those whose unique key is already held.
        ``validated`` as for :meth:`enqueue_many`."""
        if not validated:
            for spec in specs:
                validate_spec(spec)
        if not specs:
            return []
        checked = stripes <= 1
        async with self._tx.transaction() as conn:
            route = await self._route(conn)
            specs = self._striped(route, specs, stripes)
            try:
                async with self._tx.savepoint(conn):
                    return await self._append(route, specs, checked=checked)
            except UniqueConflict:
                pass
            # Some key is held (or repeated in the batch): insert one by one, skipping those.
            inserted: list[JobRecord] = []
            for spec in specs:
                try:
                    async with self._tx.savepoint(conn):
                        inserted.extend(await self._append(route, [spec], checked=checked))
                except UniqueConflict:
                    continue
            return inserted

    async def enqueue_many_copy(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> int:
        """Bulk insert on queue storage's fast path; returns how many jobs were inserted.
        Jobs whose unique key is already held are skipped. While producers still write to
        canonical storage it raises ``ValidationError`` (as awa-pg does): use
        ``insert_many_copy`` there.

        When no spec carries a unique key, the batch streams through the engine's bulk
        path (Postgres: one binary ``COPY`` into staging and one append); otherwise it
        goes through :meth:`enqueue_many_skip_duplicates`. Either way the route is read
        inside the inserting transaction, under the producers' lock. Both paths validate
        every spec before anything is written (``validated``: the caller already did, as
        for :meth:`enqueue_many`)."""
        if not specs:
            return 0
        unique = any(spec.unique_key is not None for spec in specs)
        checked = validated and stripes <= 1
        async with self._tx.transaction() as conn:
            route = await self._route(conn)
            target = route.target
            if target is None:
                raise ValidationError("enqueue_many_copy", COPY_NEEDS_QUEUE_STORAGE)
            if not unique:
                specs = self._striped(route, specs, stripes)
                if target.copy is not None:
                    return await target.copy.enqueue_many_copy(
                        specs, uow=route.uow, validated=checked
                    )
                return len(
                    await target.engine.enqueue_many(specs, uow=route.uow, validated=checked)
                )
        return len(
            await self.enqueue_many_skip_duplicates(specs, stripes=stripes, validated=validated)
        )
