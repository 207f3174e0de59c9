"""Producer, worker and callback operations of the canonical engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from awa.adapters._pg import dependencies as pg_dependencies
from awa.adapters._pg.errors import is_unique_claim_violation, translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rate_limits import key_allowances, lock_limiters
from awa.adapters._pg.rows import job_from_row, mask_param
from awa.adapters._pg.unique_conflicts import insert_merging, merging
from awa.adapters.postgres_canonical.base import AnyConnection, EngineBase, attempt_facts
from awa.domain import lifecycle
from awa.domain.callbacks import CallbackExpressions, callback_not_found, check_action
from awa.domain.errors import UniqueConflict
from awa.domain.flow_control import Admitted, KeyWindow, admit_counted
from awa.domain.job import Claim, ClaimBatch, JobRecord, JobSpec, RunLease
from awa.domain.lifecycle import AttemptFacts, Transition
from awa.domain.policies import PriorityAging
from awa.domain.rate_limits import GlobalRateLimit, key_limiter
from awa.domain.validation import validate_spec
from awa.ports.storage import Ack, UnitOfWork

_MICROSECOND = timedelta(microseconds=1)


def _ack(applied: bool) -> Ack:
    return Ack.APPLIED if applied else Ack.STALE


def _enqueue_params(specs: Sequence[JobSpec], now: datetime) -> dict[str, Any]:
    return {
        "now": now,
        "kinds": [s.kind for s in specs],
        "queues": [s.queue for s in specs],
        "args": [Jsonb(s.args) for s in specs],
        "priorities": [s.priority for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        "run_ats": [s.run_at for s in specs],
        "metadata": [Jsonb(s.metadata) for s in specs],
        "tags": [Jsonb(list(s.tags)) for s in specs],
        "unique_keys": [s.unique_key for s in specs],
        "unique_states": [mask_param(s.effective_unique_states) for s in specs],
        "ordering_keys": [s.ordering_key for s in specs],
    }


def _batch_acks(leases: Sequence[RunLease], applied: set[tuple[int, int]]) -> list[Ack]:
    # A lease repeated in one batch applies once, like the same call made twice.
    seen: set[tuple[int, int]] = set()
    acks = []
    for lease in leases:
        key = (lease.job_id, lease.lease)
        acks.append(_ack(key in applied and key not in seen))
        seen.add(key)
    return acks


class WorkerOps(EngineBase):
    """Enqueue, claim, attempt outcomes and external callbacks."""

    # ---------------------------------------------------------------- producers
    async def enqueue_many(
        self, specs: Sequence[JobSpec], *, uow: UnitOfWork | None = None
    ) -> list[JobRecord]:
        """Insert a batch in one statement; a unique clash inserts none of it."""
        specs = list(specs)
        for spec in specs:
            validate_spec(spec)
        if not specs:
            return []
        if uow is None:
            async with self._connection() as conn:
                return await self._insert(conn, specs)
        own = self._own_uow(uow)
        async with translated_errors():
            return await self._insert(own.conn, specs)

    async def _insert(self, conn: AnyConnection, specs: Sequence[JobSpec]) -> list[JobRecord]:
        if not any(spec.depends_on for spec in specs):
            # Jobs with a replace / debounce mode merge into a waiting holder (ADR 0034).
            return await insert_merging(
                conn,
                specs,
                self._clock.now(),
                lambda todo: self._insert_rows(conn, todo),
                self._atomic,
            )
        now = self._clock.now()
        # Parents read and locked, the jobs and their edges: all or nothing.
        async with self._atomic(conn):
            return await pg_dependencies.insert_with_parents(
                conn, specs, lambda planned: self._insert_rows(conn, planned), now
            )

    async def _insert_rows(self, conn: AnyConnection, specs: Sequence[JobSpec]) -> list[JobRecord]:
        params = _enqueue_params(specs, self._clock.now())
        try:
            # A savepoint keeps a caller's transaction usable after a unique conflict.
            async with self._atomic(conn):
                rows = await self._all(conn, "enqueue", params)
        except pg_errors.UniqueViolation as exc:
            if not is_unique_claim_violation(exc):
                raise
            raise await self._conflict(conn, (s.unique_key for s in specs)) from exc
        return sorted((job_from_row(row) for row in rows), key=lambda job: job.id)

    async def enqueue_many_skip_duplicates(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """Insert each spec under its own savepoint, skipping those whose key is held."""
        specs = list(specs)
        for spec in specs:
            validate_spec(spec)
        inserted: list[JobRecord] = []
        now = self._clock.now()
        async with self._transaction() as conn:
            for spec in specs:
                if merging(spec):
                    try:
                        inserted.extend(await self._insert(conn, [spec]))
                    except UniqueConflict:
                        continue
                    continue
                try:
                    async with self._atomic(conn):
                        rows = await self._all(conn, "enqueue", _enqueue_params([spec], now))
                except pg_errors.UniqueViolation as exc:
                    if not is_unique_claim_violation(exc):
                        raise
                    continue
                inserted.extend(job_from_row(row) for row in rows)
        return inserted

    # ---------------------------------------------------------------- workers
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
        """Claim with one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)``; under a
        per-key limit, in a transaction that counts each key's live attempts first
        (:meth:`_claim_limited`); under a fleet-wide rate limit, in a transaction that
        holds the queue's limiter (:meth:`_claim_rated`)."""
        if limit <= 0:
            return []
        if max_running_per_key is not None or global_rate_limit_per_key is not None:
            return await self._claim_limited(
                queue,
                limit,
                deadline,
                aging_interval,
                max_running_per_key,
                global_rate_limit,
                global_rate_limit_per_key,
            )
        if global_rate_limit is not None:
            return await self._claim_rated(
                queue, limit, deadline, aging_interval, global_rate_limit
            )
        async with self._connection() as conn:
            return await self._claim_plain(
                conn, queue, limit, deadline, aging_interval, self._clock.now()
            )

    async def _claim_rated(
        self,
        queue: str,
        limit: int,
        deadline: timedelta | None,
        aging_interval: timedelta | None,
        rate: GlobalRateLimit,
    ) -> ClaimBatch:
        """The claim under the queue's fleet-wide rate limit (ADR 0029): the limiter's row
        locked, at most what it admits claimed, the limiter moved forward, one
        transaction."""
        # One instant for the limiter and the claim, so attempted_at is the time the
        # limiter admitted the job at.
        now = self._clock.now()
        async with self._transaction() as conn:
            held = await lock_limiters(
                conn,
                queue,
                queue_limit=rate,
                per_key_limit=None,
                key_names=(),
                wanted=limit,
                now=now,
            )
            allowed = held.allowed.limit
            claims = []
            if allowed > 0:
                claims = await self._claim_plain(
                    conn, queue, allowed, deadline, aging_interval, now
                )
                await held.store(conn, taken=len(claims), taken_per_key={})
        # Held back: what the claim had room for beyond the limiter's allowance, when the
        # allowance found work (an empty limiter is taken to have had work waiting).
        cut = limit - allowed if len(claims) == allowed else 0
        return ClaimBatch(claims, rate_limited=cut, next_admission=held.next_admission)

    async def _claim_plain(
        self,
        conn: DictConnection,
        queue: str,
        limit: int,
        deadline: timedelta | None,
        aging_interval: timedelta | None,
        now: datetime,
    ) -> list[Claim]:
        deadline_at = None if deadline is None else now + deadline
        params: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "limit": limit,
            "deadline_at": deadline_at,
        }
        aging = PriorityAging(aging_interval)
        name = "claim"
        if aging_interval is not None and aging_interval > timedelta(0):
            name = "claim_aged"
            params["aging_us"] = max(1, aging_interval // _MICROSECOND)
        rows = await self._all(conn, name, params)
        jobs = sorted(
            (job_from_row(row) for row in rows),
            key=lambda job: (
                aging.effective_priority(job.priority, job.run_at, now),
                job.run_at,
                job.id,
            ),
        )
        return [Claim(job=job, lease=job.lease, deadline_at=deadline_at) for job in jobs]

    async def _claim_limited(
        self,
        queue: str,
        limit: int,
        deadline: timedelta | None,
        aging_interval: timedelta | None,
        per_key: int | None,
        rate: GlobalRateLimit | None = None,
        rate_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        """The claim of a queue with ``max_running_per_key`` (ADR 0029), in one
        transaction: the candidates (the next ``limit`` keys with work and a free slot
        after the one this process walked to last, :meth:`_key_window`, each key's first
        ``per_key`` due jobs, and the keyless jobs), the keys' locks, their live attempts
        counted after the locks, the rule
        (:func:`~awa.domain.flow_control.admit`) and the claim of what it admits."""
        now = self._clock.now()
        deadline_at = None if deadline is None else now + deadline
        aging = PriorityAging(aging_interval)
        aging_us = 0
        if aging_interval is not None and aging_interval > timedelta(0):
            aging_us = max(1, aging_interval // _MICROSECOND)
        # A key's candidates: no more than its limit, nor than its limiter's burst.
        wanted_per_key = min(
            n
            for n in (per_key, None if rate_per_key is None else rate_per_key.burst, limit)
            if n is not None
        )
        params: dict[str, Any] = {"queue": queue, "now": now, "per_key": wanted_per_key}
        async with self._transaction() as conn:
            window, keyed, live, contended = await self._key_window(
                conn, queue, params, limit, per_key, rate_per_key, now
            )
            if window.cursor is not None:
                self._key_cursor[queue] = window.cursor
            keyless = await self._all(
                conn,
                "claim_keyless_candidates",
                {**params, "limit": limit, "aging_us": aging_us},
            )
            candidates: list[tuple[int, str | None, int, datetime]] = [
                (r["id"], None, r["priority"], r["run_at"]) for r in keyless
            ]
            # A key another claimer holds is left to it; a key at its limit stays among
            # the candidates, so the claim counts what its limit holds back.
            candidates.extend(c for c in keyed if c[1] not in contended)
            candidates.sort(key=lambda c: (aging.effective_priority(c[2], c[3], now), c[3], c[0]))
            keys = sorted(window.with_room)
            held = await lock_limiters(
                conn,
                queue,
                queue_limit=rate,
                per_key_limit=rate_per_key,
                key_names={key_limiter(k) for k in keys},
                wanted=limit,
                now=now,
            )
            per_limiter = held.allowed.per_key

            def admitted(wanted: int) -> Admitted[tuple[int, str | None, int, datetime]]:
                return admit_counted(
                    candidates,
                    key_of=lambda c: c[1],
                    running=live,
                    max_running_per_key=per_key,
                    limit=wanted,
                    key_allowance=(
                        None
                        if per_limiter is None
                        else {k: per_limiter[key_limiter(k)] for k in keys}
                    ),
                )

            got = admitted(held.allowed.limit)
            taken = got.taken
            cut = len(admitted(limit).taken) - len(taken) if held.allowed.limit < limit else 0
            batch = ClaimBatch(
                rate_limited=got.rate_limited + cut,
                concurrency_limited=got.concurrency_limited,
                next_admission=held.next_admission,
            )
            if not taken:
                return batch
            rows = await self._all(
                conn,
                "claim_ids",
                {"ids": [c[0] for c in taken], "now": now, "deadline_at": deadline_at},
            )
            await held.store(
                conn,
                taken=len(taken),
                taken_per_key=dict(Counter(key_limiter(c[1]) for c in taken if c[1] is not None)),
            )
            batch.next_admission = held.next_admission
        order = {c[0]: n for n, c in enumerate(taken)}
        jobs = sorted((job_from_row(row) for row in rows), key=lambda job: order[job.id])
        batch.extend(Claim(job=job, lease=job.lease, deadline_at=deadline_at) for job in jobs)
        return batch

    async def _key_window(
        self,
        conn: DictConnection,
        queue: str,
        params: dict[str, Any],
        limit: int,
        per_key: int | None,
        rate_per_key: GlobalRateLimit | None,
        now: datetime,
    ) -> tuple[KeyWindow[str], list[tuple[int, str, int, datetime]], dict[str, int], set[str]]:
        """The keys a limited claim offers candidates of (ADR 0029, "Fairness";
        :class:`~awa.domain.flow_control.KeyWindow`): walks of the keys with available
        work in key order after the one this process walked to last (round from the
        first key when they run out), each walk's keys locked (the first walk waits for
        them in sorted order, a later one only tries, so two claimers never wait in a
        circle) and their live attempts counted after the locks; keys with no free slot,
        and keys whose per-key rate limiter has no token, are walked past. Returns the
        window, the walked keys' candidates (each key's first ``per_key`` due jobs), the
        live attempts per key and the keys left to another claimer."""
        window: KeyWindow[str] = KeyWindow(limit)
        keyed: list[tuple[int, str, int, datetime]] = []
        live: dict[str, int] = {}
        contended: set[str] = set()
        after = self._key_cursor.get(queue, "")
        # Whether the walk went round from the first key (it starts there without a
        # cursor): after that, running out of keys means every key was walked.
        wrapped = after == ""
        seen: set[str] = set()
        while (wanted := window.keys_to_walk()) > 0:
            walked: list[str] = []
            due: set[str] = set()
            came_round = False
            while len(walked) < wanted and not came_round:
                asked = wanted - len(walked)
                rows = await self._all(
                    conn,
                    "claim_keyed_candidates",
                    {**params, "after_key": after, "keys_wanted": asked},
                )
                got: list[str] = []
                for row in rows:
                    key = row["walked"]
                    if not got or got[-1] != key:
                        if key in seen:
                            # round to the keys walked already: every key was walked
                            came_round = True
                            break
                        got.append(key)
                        seen.add(key)
                    if row["id"] is not None:
                        due.add(key)
                        keyed.append((row["id"], key, row["priority"], row["run_at"]))
                walked.extend(got)
                if got:
                    after = got[-1]
                if len(got) < asked and not came_round:
                    if wrapped:
                        came_round = True
                    else:
                        # The keys after the cursor ran out: round from the first.
                        wrapped, after = True, ""
            locked = sorted(due)
            if locked and per_key is not None:
                if window.walks == 0:
                    await self._all(conn, "lock_concurrency_keys", {"queue": queue, "keys": locked})
                else:
                    rows = await self._all(
                        conn, "try_lock_concurrency_keys", {"queue": queue, "keys": locked}
                    )
                    held_keys = {row["k"] for row in rows}
                    contended.update(k for k in locked if k not in held_keys)
                    locked = [k for k in locked if k in held_keys]
                if locked:
                    counted = await self._all(
                        conn, "live_per_key", {"queue": queue, "keys": locked}
                    )
                    live.update({row["concurrency_key"]: int(row["live"]) for row in counted})

            free: dict[str, int] = {}
            for key in walked:
                if key not in due or key in contended:
                    free[key] = 0
                elif per_key is None:
                    free[key] = limit
                else:
                    free[key] = per_key - live.get(key, 0)
            if rate_per_key is not None and walked:
                # A key whose limiter has no token gives its place to the next key.
                tokens = await key_allowances(
                    conn,
                    queue,
                    per_key_limit=rate_per_key,
                    key_names=[key_limiter(k) for k in walked],
                    now=now,
                )
                for key in walked:
                    free[key] = min(free[key], tokens[key_limiter(key)])
            window.add(walked, wanted, free.__getitem__)
            if per_key is None and rate_per_key is None:
                # Without a limit every key walked with due work has room.
                break
        return window, keyed, live, contended

    async def _batch(self, name: str, leases: Sequence[RunLease]) -> list[Ack]:
        leases = list(leases)
        if not leases:
            return []
        params = {
            "now": self._clock.now(),
            "ids": [lease.job_id for lease in leases],
            "leases": [lease.lease for lease in leases],
        }
        async with self._connection() as conn:
            rows = await self._all(conn, name, params)
        return _batch_acks(leases, {(row["id"], row["run_lease"]) for row in rows})

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        """Complete a batch of attempts in one statement."""
        leases = list(leases)
        if not leases:
            return []
        now = self._clock.now()
        done = lifecycle.complete(now)
        async with self._connection() as conn:
            applied, _ = await self._apply(
                conn, [(lease, done) for lease in leases], now=now, effects=True
            )
        return _batch_acks(leases, applied)

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        """Refresh heartbeats of running attempts in one statement."""
        return await self._batch("heartbeat", leases)

    async def _guarded(self, name: str, lease: RunLease, **params: Any) -> Ack:
        now = self._clock.now()
        values = {"id": lease.job_id, "lease": lease.lease, "now": now}
        values.update(params)
        async with self._connection() as conn:
            row = await self._one(conn, name, values)
        return _ack(row is not None)

    async def _close(self, lease: RunLease, transition: Transition) -> Ack:
        """Apply a transition that needs no fact about the attempt, in one statement."""
        async with self._connection() as conn:
            applied, _ = await self._apply(
                conn, [(lease, transition)], now=self._clock.now(), effects=True
            )
        return _ack(bool(applied))

    async def _decide(
        self, lease: RunLease, decide: Callable[[AttemptFacts, datetime], Transition]
    ) -> Ack:
        """Lock the attempt, let ``decide`` make its transition from the row's facts and
        apply it (and the DLQ move it routes to)."""
        now = self._clock.now()
        async with self._transaction() as conn:
            row = await self._one(
                conn, "lock_live_attempt", {"id": lease.job_id, "lease": lease.lease}
            )
            if row is None:
                return Ack.STALE
            applied, _ = await self._apply(
                conn, [(lease, decide(attempt_facts(row), now))], now=now, effects=True
            )
        return _ack(bool(applied))

    async def retry(self, lease: RunLease, *, error: str, delay: timedelta | None = None) -> Ack:
        """Retry (or fail when exhausted); the row is locked so backoff can read ``attempt``."""
        return await self._decide(
            lease,
            lambda facts, now: lifecycle.retry(
                facts,
                error=error,
                now=now,
                backoff=self._backoff,
                policies=self._policies,
                delay=delay,
            ),
        )

    async def snooze(self, lease: RunLease, *, delay: timedelta) -> Ack:
        """Back to ``scheduled`` without spending the attempt."""
        return await self._close(lease, lifecycle.snooze(delay=delay, now=self._clock.now()))

    async def cancel_attempt(self, lease: RunLease, *, reason: str) -> Ack:
        """The handler cancelled: ``cancelled`` now, no error entry."""
        return await self._close(lease, lifecycle.cancel(self._clock.now()))

    async def fail(self, lease: RunLease, *, error: str) -> Ack:
        """Terminal failure, then into the DLQ when the queue has it enabled."""
        return await self._decide(
            lease, lambda facts, now: lifecycle.fail(facts, error=error, now=now)
        )

    async def release(self, lease: RunLease, *, error: str) -> Ack:
        """Give the attempt back: retryable now, attempt not spent, error recorded."""
        return await self._decide(
            lease, lambda facts, now: lifecycle.release(facts, error=error, now=now)
        )

    async def update_progress(
        self,
        lease: RunLease,
        *,
        progress: dict[str, Any] | None,
        metadata_updates: dict[str, Any] | None = None,
    ) -> Ack:
        """Replace progress (unless ``None``), merge metadata and refresh the heartbeat."""
        return await self._guarded(
            "update_progress",
            lease,
            progress=None if progress is None else Jsonb(progress),
            metadata=Jsonb(metadata_updates or {}),
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
        """Attach a callback id (and its CEL expressions) to a running attempt."""
        exprs = expressions or CallbackExpressions()
        return await self._guarded(
            "register_callback",
            lease,
            callback_id=callback_id,
            timeout_at=self._clock.now() + timeout,
            filter=exprs.filter,
            on_complete=exprs.on_complete,
            on_fail=exprs.on_fail,
            transform=exprs.transform,
        )

    async def callback_expressions(self, callback_id: str) -> CallbackExpressions | None:
        """The CEL expressions of the live attempt carrying ``callback_id``."""
        async with self._connection() as conn:
            row = await self._one(conn, "callback_expressions", {"callback_id": callback_id})
        if row is None:
            raise callback_not_found(callback_id)
        found = CallbackExpressions(
            filter=row["callback_filter"],
            on_complete=row["callback_on_complete"],
            on_fail=row["callback_on_fail"],
            transform=row["callback_transform"],
        )
        return None if found.is_empty else found

    async def wait_for_callback(self, lease: RunLease) -> Ack:
        """Park a running attempt that has a callback id in ``waiting_external``."""
        return await self._guarded("wait_for_callback", lease)

    async def resolve_callback(
        self,
        callback_id: str,
        *,
        action: str,
        payload: Any = None,
        error: str | None = None,
        expression: str | None = None,
    ) -> JobRecord:
        """Resolve the live attempt carrying ``callback_id``."""
        resolution = check_action(action)
        now = self._clock.now()
        async with self._transaction() as conn:
            row = await self._one(conn, "lock_by_callback", {"callback_id": callback_id})
            if row is None:
                raise callback_not_found(callback_id)
            transition = lifecycle.callback_resolution(
                resolution,
                attempt_facts(row),
                payload=payload,
                error=error,
                expression=expression,
                now=now,
            )
            return await self._apply_locked(conn, row, transition, now, effects=True)

    async def heartbeat_callback(self, callback_id: str, *, timeout: timedelta) -> JobRecord:
        """Push the callback timeout of the live attempt carrying ``callback_id``."""
        now = self._clock.now()
        async with self._transaction() as conn:
            row = await self._one(conn, "lock_by_callback", {"callback_id": callback_id})
            if row is None:
                raise callback_not_found(callback_id)
            beat = lifecycle.callback_heartbeat(timeout=timeout, now=now)
            return await self._apply_locked(conn, row, beat, now)
