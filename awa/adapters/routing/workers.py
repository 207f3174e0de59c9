"""Workers of the routing engine: claims follow the cached transition state, and every
mutation of an attempt goes to the engine the attempt was claimed from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from awa.adapters.routing.base import C, Owner, RoutingBase, T
from awa.domain.callbacks import CallbackExpressions, callback_not_found
from awa.domain.errors import CallbackNotFound
from awa.domain.job import Claim, ClaimBatch, JobRecord, RunLease
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.stripes import stripe_queues
from awa.domain.transition import claims_canonical, claims_queue_storage
from awa.ports.storage import Ack, StorageEngine


class WorkerOps(RoutingBase[C]):
    """Claims, attempt outcomes, heartbeats and callbacks."""

    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        return await self._claim(
            queue,
            queue,
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
            max_running_per_key=max_running_per_key,
            global_rate_limit=global_rate_limit,
            global_rate_limit_per_key=global_rate_limit_per_key,
        )

    async def claim_stripe(
        self,
        queue: str,
        stripe: int,
        stripes: int,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
    ) -> list[Claim]:
        """Claim from stripe ``stripe`` of ``stripes`` of the logical ``queue``: its
        physical queue ``queue#stripe`` on queue storage, ``queue`` itself on canonical
        (no stripes there)."""
        physical = stripe_queues(queue, stripes)
        return await self._claim(
            queue,
            physical[stripe % len(physical)],
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
        )

    async def _claim(
        self,
        canonical_queue: str,
        storage_queue: str,
        *,
        limit: int,
        deadline: timedelta | None,
        aging_interval: timedelta | None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        status = await self._hot_status()
        limits: dict[str, Any] = {}
        if global_rate_limit is not None or global_rate_limit_per_key is not None:
            # Both engines share the database's limiters (awa.rate_limiters): a claim of
            # each is admitted by the same fleet-wide limit.
            limits = {
                "global_rate_limit": global_rate_limit,
                "global_rate_limit_per_key": global_rate_limit_per_key,
            }
        claims = ClaimBatch()
        parts: list[list[Claim]] = []
        if claims_canonical(status.state, self._role):
            got = await self._canonical.claim(
                canonical_queue,
                limit=limit,
                deadline=deadline,
                aging_interval=aging_interval,
                max_running_per_key=max_running_per_key,
                **limits,
            )
            parts.append(got)
            for claim in got:
                self._owners[claim.lease.job_id] = "canonical"
                claims.append(claim)
        if len(claims) < limit and claims_queue_storage(status.state, self._role):
            got = await self.queue_storage(status.schema).claim(
                storage_queue,
                limit=limit - len(claims),
                deadline=deadline,
                aging_interval=aging_interval,
                max_running_per_key=max_running_per_key,
                **limits,
            )
            parts.append(got)
            for claim in got:
                self._owners[claim.lease.job_id] = "queue_storage"
                claims.append(claim)
        if parts:
            # What held back the last engine's claim is what held back this one.
            last = parts[-1]
            if isinstance(last, ClaimBatch):
                claims.rate_limited = last.rate_limited
                claims.concurrency_limited = last.concurrency_limited
                claims.next_admission = last.next_admission
        return claims

    async def warm_up(self, queues: Sequence[str]) -> None:
        """:class:`~awa.ports.storage.WorkerWarmUp`: warm the queue-storage engine when
        this runtime claims from it (and it can be warmed)."""
        status = await self._hot_status()
        if claims_queue_storage(status.state, self._role):
            warm = self._target(status.schema).warm
            if warm is not None:
                await warm.warm_up(queues)

    async def _owners_of(self, job_ids: Sequence[int]) -> dict[int, Owner]:
        """The engine holding each job: remembered from the claim, else looked up."""
        found: dict[int, Owner] = {}
        unknown = []
        for job_id in job_ids:
            owner = self._owners.get(job_id)
            if owner is None:
                unknown.append(job_id)
            else:
                found[job_id] = owner
        if unknown:
            canonical = await self._transition.canonical_job_ids(unknown)
            for job_id in unknown:
                found[job_id] = "canonical" if job_id in canonical else "queue_storage"
        return found

    async def _per_lease(
        self,
        lease: RunLease,
        call: Callable[[StorageEngine], Awaitable[T]],
        *,
        closes: bool,
    ) -> T:
        owner = (await self._owners_of([lease.job_id]))[lease.job_id]
        status = await self._hot_status()
        try:
            return await call(self._engine(owner, status))
        finally:
            if closes:
                self._owners.pop(lease.job_id, None)

    async def _batch(
        self,
        leases: Sequence[RunLease],
        call: Callable[[StorageEngine, list[RunLease]], Awaitable[list[Ack]]],
        *,
        closes: bool,
    ) -> list[Ack]:
        if not leases:
            return []
        owners = await self._owners_of([lease.job_id for lease in leases])
        status = await self._hot_status()
        groups: dict[Owner, list[int]] = {}
        for index, lease in enumerate(leases):
            groups.setdefault(owners[lease.job_id], []).append(index)
        acks: list[Ack] = [Ack.STALE] * len(leases)
        try:
            for owner, indexes in groups.items():
                got = await call(self._engine(owner, status), [leases[i] for i in indexes])
                for index, ack in zip(indexes, got, strict=True):
                    acks[index] = ack
        finally:
            if closes:
                for lease in leases:
                    self._owners.pop(lease.job_id, None)
        return acks

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._batch(leases, lambda e, ls: e.complete(ls), closes=True)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        return await self._batch(leases, lambda e, ls: e.heartbeat(ls), closes=False)

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        return await self._per_lease(
            lease, lambda e: e.retry(lease, error=error, delay=delay), closes=True
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        return await self._per_lease(lease, lambda e: e.snooze(lease, delay=delay), closes=True)

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        return await self._per_lease(
            lease, lambda e: e.cancel_attempt(lease, reason=reason), closes=True
        )

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        return await self._per_lease(lease, lambda e: e.fail(lease, error=error), closes=True)

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        return await self._per_lease(lease, lambda e: e.release(lease, error=error), closes=True)

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        return await self._per_lease(
            lease,
            lambda e: e.update_progress(
                lease, progress=progress, metadata_updates=metadata_updates
            ),
            closes=False,
        )

    # ---------------------------------------------------------------- callbacks
    async def register_callback(
        self,
        lease: RunLease,
        *,
        callback_id: str,
        timeout: timedelta,
        expressions: CallbackExpressions | None = None,
    ) -> Ack:
        return await self._per_lease(
            lease,
            lambda e: e.register_callback(
                lease, callback_id=callback_id, timeout=timeout, expressions=expressions
            ),
            closes=False,
        )

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        engines = self._read_order(await self.status(max_age=0.0))
        for index, engine in enumerate(engines):
            try:
                return await engine.callback_expressions(callback_id)
            except CallbackNotFound:
                if index == len(engines) - 1:
                    raise
        raise callback_not_found(callback_id)

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        return await self._per_lease(lease, lambda e: e.wait_for_callback(lease), closes=False)

    async def _by_callback(
        self, call: Callable[[StorageEngine], Awaitable[JobRecord]]
    ) -> JobRecord:
        engines = self._read_order(await self.status(max_age=0.0))
        for index, engine in enumerate(engines):
            try:
                return await call(engine)
            except CallbackNotFound:
                if index == len(engines) - 1:
                    raise
        raise callback_not_found("(no engine)")

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        return await self._by_callback(
            lambda e: e.resolve_callback(
                callback_id, action=action, payload=payload, error=error, expression=expression
            )
        )

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        return await self._by_callback(lambda e: e.heartbeat_callback(callback_id, timeout=timeout))
