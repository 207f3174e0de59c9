"""Per-queue dispatcher: reserve capacity, claim a batch, hand claims to executors."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup, TaskStatus

from awa.domain.channels import queue_channel
from awa.domain.job import Claim, ClaimBatch
from awa.domain.overrides import DispatchSettings, QueueOverrides, apply_overrides
from awa.domain.policies import PriorityAging
from awa.domain.rate_limits import GlobalRateLimit
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES, stripe_queues
from awa.ports.clock import Clock
from awa.ports.overrides import QueueOverrideStore
from awa.ports.storage import StorageEngine, StripedClaimer
from awa.runtime import metrics
from awa.runtime.claim_ahead import ClaimPacer
from awa.runtime.config import QueueConfig
from awa.runtime.log_throttle import FailureLog
from awa.runtime.permits import PermitPool
from awa.runtime.rate_limit import TokenBucket
from awa.runtime.wake import Waker

log = logging.getLogger("awa.runtime.dispatcher")

Spawn = Callable[[str, Claim], None]
"""Start executing a claim whose permit is already held."""

RELEASE_ON_STOP_ERROR = "worker shutting down"
# While jobs are waiting, permits come back one handler at a time. A claim costs about the
# same for one job as for a batch, so a loop holding only a few permits lets more come back
# for this long before it claims (once per claim; never while the queue is idle).
_GATHER_SECONDS = 0.001
# After a claim that came back short but not empty: how soon to look again when no
# notification wakes the loop first (returning permits wake only a loop without any).
_RECHECK = 0.02
#: While no notification can wake the loops (polling only: a transaction-mode pooler and
#: no listen URL), how soon a claim that found jobs is followed by the next; each claim
#: that comes back empty doubles the wait, up to the poll interval (ADR 0015 amendment
#: "Polling that follows the work").
POLL_FOLLOW = 0.005
#: Claims ahead in flight at once: one per loop claim of a round trip, and one more for a
#: round trip that came back late (each holds a claim connection while in flight).
_AHEAD_IN_FLIGHT = 2
#: How often a dispatcher re-reads its queue's live overrides (``AWA_OVERRIDE_REFRESH_MS``).
DEFAULT_OVERRIDE_REFRESH = 10.0
_OVERRIDE_REFRESH_FLOOR = 0.05


def override_refresh_interval() -> float:
    """Seconds between override reads: ``AWA_OVERRIDE_REFRESH_MS`` (at least 50 ms) or
    :data:`DEFAULT_OVERRIDE_REFRESH`."""
    raw = os.environ.get("AWA_OVERRIDE_REFRESH_MS")
    if not raw:
        return DEFAULT_OVERRIDE_REFRESH
    try:
        return max(_OVERRIDE_REFRESH_FLOOR, int(raw) / 1000.0)
    except ValueError:
        log.warning("AWA_OVERRIDE_REFRESH_MS=%r is not a number of milliseconds; using 10 s", raw)
        return DEFAULT_OVERRIDE_REFRESH


def as_claimed(claim: Claim, aging: PriorityAging) -> Claim:
    """The claim as the handler sees it: the attempt's effective priority, ``aging``
    applied from when the job became runnable to when it was claimed (what ordered the
    claim). The stored priority is left as it was."""
    job = claim.job
    claimed_at = job.attempted_at or job.run_at
    aged = aging.effective_priority(job.priority, job.run_at, claimed_at)
    if aged == job.priority:
        return claim
    return attrs.evolve(claim, job=attrs.evolve(job, priority=aged))


class QueueDispatcher:
    """``claimers`` claim loops for one queue sharing its permits and rate limit.

    Each loop reserves permits first (bounded by free permits, ``claim_batch_size`` and
    rate tokens), claims at most that many, and gives back what it did not use. Loops
    sleep up to ``poll_interval`` and are woken early by :meth:`wake` (the runtime calls
    it when one of :attr:`channels` is notified) and by permits coming back.

    While ``polling()`` says no notification can wake them (the runtime's subscription
    found that notifications cannot arrive, or is down), a loop whose claim found jobs
    looks again :data:`POLL_FOLLOW` later, and each claim that comes back empty doubles
    the wait up to ``poll_interval``: pickups follow the work without notifications, and
    every claim either takes a job or makes the next one wait twice as long.

    With ``stripes > 1`` on an engine that stores stripes (:class:`StripedClaimer`) each
    claim takes one stripe ``queue#k``, ``k`` rotating over the stripes; a loop sleeps only
    after a whole rotation came up short, and every stripe's channel wakes it.
    Permits and the rate limit stay those of the logical queue.

    While claims take two or more jobs per round trip but come back with fewer than they
    asked for, over a link slower than a local one, a claim also goes half a round trip
    after each one the loops send, while that one is still in flight
    (:mod:`awa.runtime.claim_ahead`, ADR 0037); the two share the free permits. Not with
    stripes or a rate limit.

    Otherwise, a notification that arrives while every loop's claim is in flight sends a
    claim at once, beside them, instead of waiting for one of them to come back: the job
    it announces may have committed after their snapshots (ADR 0037, amendment "A
    notification during a claim"). At most one such claim at a time; while the last claim
    came back short, a loop's claim reserves half of the free permits so that it has room.
    When that claim comes back empty, the loops get the pending wake as well: its job may
    sit in a lane the claim in flight holds locked (amendment "A claim beside a locked
    lane").

    The dispatcher reads its queue's live overrides (``awa queue overrides set``) before
    its first claim and every ``override_refresh`` seconds after, beside the claims (a
    claim never waits for the read), and claims with them from then on; see
    :mod:`awa.domain.overrides` for what an override may change.
    """

    def __init__(
        self,
        config: QueueConfig,
        engine: StorageEngine,
        permits: PermitPool,
        *,
        poll_interval: float,
        spawn: Spawn,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        overrides: QueueOverrideStore | None = None,
        override_refresh: float | None = None,
        polling: Callable[[], bool] | None = None,
        clock: Clock,
    ) -> None:
        self.config = config
        self.queue = config.name
        self._engine = engine
        self._permits = permits
        self._poll_interval = poll_interval
        self._polling = polling
        # Polling only: the wait after the last short claim (doubled by each empty one).
        self._poll_wait = POLL_FOLLOW
        self._spawn = spawn
        self._clock = clock
        self._bucket = (
            TokenBucket(config.rate_limit.rate, config.rate_limit.burst, monotonic=clock.monotonic)
            if config.rate_limit is not None
            else None
        )
        self._wakers = [Waker(clock) for _ in range(config.claimers)]
        self.started_settings = DispatchSettings(
            poll_interval=poll_interval,
            claim_batch_size=config.claim_batch_size,
            rate_limit=(
                None
                if config.rate_limit is None
                else (config.rate_limit.rate, config.rate_limit.burst)
            ),
            deadline=config.deadline,
            max_running_per_key=config.max_running_per_key,
            global_rate_limit=config.global_rate_limit,
            global_rate_limit_per_key=config.global_rate_limit_per_key,
        )
        #: the settings claims use now: the started ones with live overrides applied
        self.settings = self.started_settings
        self._override_store = overrides
        self._override_refresh = (
            override_refresh_interval() if override_refresh is None else override_refresh
        )
        self._overrides_due = 0.0
        self._overrides_seen: QueueOverrides | None = None
        self._refreshing_overrides = False
        # The task group of run(), where override reads go (None while not running).
        self._background: TaskGroup | None = None
        physical = stripe_queues(config.name, stripes)
        self._stripes = len(physical)
        self._claim_stripe = (
            engine.claim_stripe
            if self._stripes > 1 and isinstance(engine, StripedClaimer)
            else None
        )
        #: What announces new jobs for this queue: ``awa:<queue>`` and its stripes'
        #: channels. The runtime listens on them and calls :meth:`wake`.
        self.channels = [queue_channel(q) for q in dict.fromkeys([config.name, *physical])]
        self._next_stripe = 0
        self._pacer = ClaimPacer()
        self._ahead = self._claim_stripe is None and self._bucket is None
        # The loops' claims in flight and how many they sent; a claim sent by a loop
        # sets _claim_sent, which the claim ahead waits for.
        self._loop_claims = 0
        self._loop_claims_sent = 0
        #: Claims ahead sent and not back yet (at most _AHEAD_IN_FLIGHT).
        self._ahead_in_flight = 0
        self._claim_sent: anyio.Event | None = None
        #: Claims sent ahead (while a loop's claim was in flight).
        self.ahead_claims = 0
        #: Claims sent at a notification that arrived while every loop's claim was in flight.
        self.wake_claims = 0
        self._wake_claim_in_flight = False
        self._short_claims = 0
        self._stopping = False
        self._live_loops = 0
        self.claim_calls = 0
        self.last_claim_ok: bool = True
        self.last_loop_at: float | None = None
        # The last claim filled every permit it had: more jobs are probably waiting.
        self._backlogged = False
        # Loops that found no free permit and wait for one to come back. Only these are
        # woken by returning permits: a loop that came up short waits for a notification
        # or its poll, or every finished handler would cost an empty claim.
        self._starved: set[Waker] = set()
        permits.add_listener(self.queue, self._permits_returned)
        self._instruments = metrics.instruments()
        # While the database is unreachable every loop fails every poll: one line per
        # cause, counted repeats, one recovery line (awa.runtime.log_throttle).
        self._claim_failures = FailureLog(
            log, "claim", prefix=f"queue {self.queue}: ", clock=clock.monotonic
        )
        self._override_failures = FailureLog(
            log, "reading live overrides", prefix=f"queue {self.queue}: ", clock=clock.monotonic
        )

    @property
    def alive(self) -> bool:
        return self._live_loops == self.config.claimers

    def wake(self) -> None:
        if self._claim_on_wake():
            return
        for waker in self._wakers:
            waker.wake()

    def _claim_on_wake(self) -> bool:
        """A notification while every loop's claim is in flight: claim now, beside them.
        A loop would otherwise claim only once its claim is back, and the job announced
        (committed after that claim's snapshot, or the claim would have taken it) waits
        for the rest of that round trip first. Whether a claim went; if not, the loops
        are woken as usual."""
        if (
            not self._ahead
            or self._stopping
            or self._background is None
            or self._wake_claim_in_flight
            or self._loop_claims < len(self._wakers)
            # Claims already go ahead every half round trip (ADR 0037).
            or self._pacer.ahead_after() is not None
        ):
            return False
        wanted = min(self.settings.claim_batch_size, self._permits.available(self.queue))
        granted = self._permits.try_reserve(self.queue, wanted)
        if granted == 0:
            return False
        self._wake_claim_in_flight = True
        self.wake_claims += 1
        if self._instruments is not None:
            self._instruments.count("awa.dispatch.claims_on_wake", self._queue_key)
        self._background.start_soon(self._wake_claim, granted)
        return True

    async def _wake_claim(self, granted: int) -> None:
        claims: list[Claim] | None = None
        try:
            claims = await self._claim_batch(granted)
        finally:
            self._wake_claim_in_flight = False
            if not self._stopping and not claims:
                # Empty (or failed): the job announced is in a lane the loop's claim in
                # flight holds (claims skip locked lane heads) under a snapshot taken
                # before the job committed, or that claim took it. Leave the loops the
                # pending wake, so one claims again as soon as its claim is back; without
                # it the job waited for the next notification or the loop's re-check
                # (issue 39). One that took jobs spent the notification as before.
                for waker in self._wakers:
                    waker.wake()

    def _permits_returned(self) -> None:
        for waker in self._starved:
            waker.wake()

    def reset(self) -> None:
        """Allow claiming again after a previous :meth:`stop` (runtime restart)."""
        self._stopping = False

    def stop(self) -> None:
        """Stop claiming: loops exit after their current claim (no new claims start)."""
        self._stopping = True
        self.wake()
        if self._claim_sent is not None:
            self._claim_sent.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # The first claims use the overrides in force at start; later reads run beside
        # the claims (_refresh_overrides_soon), never on a job's pickup.
        await self._refresh_overrides()
        try:
            async with anyio.create_task_group() as loops:
                self._background = loops
                for waker in self._wakers:
                    # Started means counted: a runtime is alive once start() returns.
                    await loops.start(self._claim_loop, waker)
                if self._ahead:
                    loops.start_soon(self._ahead_loop)
                task_status.started()
        finally:
            self._background = None

    async def _claim_loop(
        self, waker: Waker, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._live_loops += 1
        task_status.started()
        try:
            while not self._stopping:
                self.last_loop_at = self._clock.monotonic()
                await self._iteration(waker)
        finally:
            self._live_loops -= 1

    async def _refresh_overrides(self) -> None:
        """Read the queue's overrides when due (one read per dispatcher, not per loop)
        and apply them; a failed read keeps the settings in force."""
        store = self._override_store
        now = self._clock.monotonic()
        if store is None or now < self._overrides_due or self._refreshing_overrides:
            return
        self._refreshing_overrides = True
        self._overrides_due = now + self._override_refresh
        try:
            overrides = await store.get_queue_overrides(self.queue)
        except Exception as exc:
            self._override_failures.failed(exc, "; the settings in force stay")
            return
        finally:
            self._refreshing_overrides = False
        self._override_failures.succeeded()
        if overrides == self._overrides_seen:
            return
        self._overrides_seen = overrides
        settings, ignored = apply_overrides(self.started_settings, overrides)
        if self._stripes > 1 and (
            settings.global_rate_limit is not None or settings.global_rate_limit_per_key is not None
        ):
            ignored.append(
                f"fleet-wide rate limit override ignored: the queue is claimed in "
                f"{self._stripes} stripes, whose claim does not consult the limiter "
                "(start it with queue_storage_queue_stripe_count=1)"
            )
            settings = attrs.evolve(
                settings, global_rate_limit=None, global_rate_limit_per_key=None
            )
        for reason in ignored:
            log.warning("queue %s: %s", self.queue, reason)
        self._apply(settings)
        log.info(
            "queue %s: claiming with poll interval %.3fs, batch %d, rate limit %s, deadline %s, "
            "max running per key %s, fleet-wide rate limit %s, per key %s",
            self.queue,
            settings.poll_interval,
            settings.claim_batch_size,
            settings.rate_limit,
            settings.deadline,
            settings.max_running_per_key,
            _rate_text(settings.global_rate_limit),
            _rate_text(settings.global_rate_limit_per_key),
        )

    def _apply(self, settings: DispatchSettings) -> None:
        self.settings = settings
        self._poll_interval = settings.poll_interval
        if self._bucket is not None and settings.rate_limit is not None:
            self._bucket.retune(*settings.rate_limit)

    def _refresh_overrides_soon(self) -> None:
        """Start the override read when one is due, beside the claim loops: a read on
        the claim's path would cost the jobs of that claim a round trip (issue 39)."""
        if (
            self._override_store is None
            or self._background is None
            or self._refreshing_overrides
            or self._clock.monotonic() < self._overrides_due
        ):
            return
        self._background.start_soon(self._refresh_overrides)

    async def _iteration(self, waker: Waker) -> None:
        self._refresh_overrides_soon()
        wanted = self.settings.claim_batch_size
        if self._bucket is not None:
            wanted = self._bucket.take(wanted)
            if wanted == 0:
                if self._instruments is not None:
                    self._instruments.count("awa.dispatch.rate_limited", self._queue_key)
                await waker.wait(min(self._poll_interval, self._bucket.seconds_until_token()))
                return
        if self._ahead:
            wanted = self._pacer.share(
                self._permits.available(self.queue), wanted, self._backlogged
            )
        granted = self._permits.try_reserve(self.queue, wanted)
        if 0 < granted < wanted and self._backlogged:
            capacity = self._permits.in_flight(self.queue) + self._permits.available(self.queue)
            if granted < min(wanted, capacity // 2):
                await self._clock.sleep(_GATHER_SECONDS)
                granted += self._permits.try_reserve(self.queue, wanted - granted)
            elif granted < min(wanted, capacity):
                # The attempts of the last claim were handed over just now: short ones
                # finish within one pass of the event loop and give their permits back.
                # Let them, and claim those slots too, or a backlog of short jobs is
                # claimed in halves that alternate with each other's handlers for good
                # (twice the claims, a fifth more server CPU per job).
                await anyio.lowlevel.checkpoint()
                granted += self._permits.try_reserve(self.queue, wanted - granted)
        if self._bucket is not None:
            self._bucket.refund(wanted - granted)
        if granted == 0:
            # Woken when a permit comes back; the timeout is only a safety net.
            self._starved.add(waker)
            try:
                await waker.wait(self._poll_interval)
            finally:
                self._starved.discard(waker)
            return
        self._loop_claims += 1
        self._loop_claims_sent += 1
        if self._claim_sent is not None:
            self._claim_sent.set()
        try:
            claims = await self._claim_batch(granted)
        finally:
            self._loop_claims -= 1
        if claims is None:
            await waker.wait(self._poll_interval)
            return
        self._backlogged = len(claims) == granted
        if self._stopping:
            return
        if len(claims) < granted:
            # Striped: the next stripe may hold work, so sleep only after a full rotation.
            self._short_claims += 1
            if self._short_claims >= self._stripes:
                self._short_claims = 0
                # An empty claim means the queue had nothing for this loop. One that found
                # some jobs but fewer than it asked for may have skipped lanes another
                # worker was claiming from: look again soon, not after a whole poll.
                wait = self._wait_after_short(found=bool(claims))
                if isinstance(claims, ClaimBatch) and claims.next_admission is not None:
                    # Cut short by the fleet's rate limiter: look again when it has
                    # tokens for a batch (within the poll interval, so overrides and
                    # new work are still seen).
                    until = (claims.next_admission - self._clock.now()).total_seconds()
                    wait = min(self._poll_interval, max(until, 0.001))
                await waker.wait(wait)
        else:
            self._short_claims = 0
            self._poll_wait = POLL_FOLLOW

    def _wait_after_short(self, *, found: bool) -> float:
        """How long a loop waits, unless woken, after a rotation of claims came back
        short (``found``: the last one took jobs)."""
        if self._polling is not None and self._polling():
            self._poll_wait = (
                POLL_FOLLOW if found else min(self._poll_wait * 2, self._poll_interval)
            )
            return min(self._poll_interval, self._poll_wait)
        return min(self._poll_interval, _RECHECK) if found else self._poll_interval

    async def _claim_batch(self, granted: int) -> list[Claim] | None:
        """Claim up to ``granted`` jobs (their permits held) and start them; None when
        the claim failed (its permits are given back)."""
        started = self._clock.monotonic()
        timer = time.perf_counter()
        try:
            self.claim_calls += 1
            if self._claim_stripe is None:
                fleet: dict[str, Any] = {}
                if (
                    self.settings.global_rate_limit is not None
                    or self.settings.global_rate_limit_per_key is not None
                ):
                    fleet = {
                        "global_rate_limit": self.settings.global_rate_limit,
                        "global_rate_limit_per_key": self.settings.global_rate_limit_per_key,
                    }
                claims = await self._engine.claim(
                    self.queue,
                    limit=granted,
                    deadline=self.settings.deadline,
                    aging_interval=self.config.aging_interval,
                    max_running_per_key=self.settings.max_running_per_key,
                    **fleet,
                )
            else:
                stripe, self._next_stripe = self._next_stripe, self._next_stripe + 1
                claims = await self._claim_stripe(
                    self.queue,
                    stripe % self._stripes,
                    self._stripes,
                    limit=granted,
                    deadline=self.settings.deadline,
                    aging_interval=self.config.aging_interval,
                )
        except Exception as exc:
            self.last_claim_ok = False
            self._backlogged = False
            self._pacer.failed()
            self._give_back(granted)
            self._claim_failures.failed(exc)
            return None
        self.last_claim_ok = True
        self._claim_failures.succeeded()
        now = self._clock.monotonic()
        self._pacer.completed(now - started, granted, len(claims), now)
        if self._instruments is not None:
            self._record_claim(claims, granted, time.perf_counter() - timer)
        held = claims if isinstance(claims, ClaimBatch) else None
        if held is not None and self._instruments is not None:
            if held.rate_limited:
                self._instruments.count("awa.job.rate_limited", self._queue_key, held.rate_limited)
            if held.concurrency_limited:
                self._instruments.count(
                    "awa.job.concurrency_limited", self._queue_key, held.concurrency_limited
                )
        self._give_back(granted - len(claims))
        if self._permits.weighted:
            self._permits.set_demand(self.queue, len(claims) == granted)
        if self._stopping:
            # Shutdown began while this claim was in flight: hand the jobs straight back.
            await self._release_unstarted(claims)
            return claims
        aging = PriorityAging(self.config.aging_interval)
        for claim in claims:
            self._spawn(self.queue, as_claimed(claim, aging))
        return claims

    async def _ahead_loop(self) -> None:
        """Half a round trip after a loop sent a claim, while that claim is still in
        flight and the pacer says claims should go ahead, send one more (ADR 0037)."""
        while not self._stopping:
            self._claim_sent = anyio.Event()
            await self._claim_sent.wait()
            delay = self._pacer.ahead_after()
            if delay is None:
                continue
            sent = self._loop_claims_sent
            await self._clock.sleep(delay)
            if (
                self._stopping
                or self._loop_claims == 0
                or self._loop_claims_sent != sent
                or self._pacer.ahead_after() is None
                or self._ahead_in_flight >= _AHEAD_IN_FLIGHT
                or self._background is None
            ):
                # Back already, or another claim went meanwhile: nothing to go ahead of.
                continue
            wanted = self._pacer.share(
                self._permits.available(self.queue), self.settings.claim_batch_size, False
            )
            granted = self._permits.try_reserve(self.queue, wanted)
            if granted == 0:
                continue
            self.ahead_claims += 1
            if self._instruments is not None:
                self._instruments.count("awa.dispatch.claims_ahead", self._queue_key)
            # Beside this loop, not awaited by it: the loop's next claim, sent while this
            # one is still in flight, gets a claim ahead of its own too. Awaited here,
            # every other loop claim went without one, and claims reached the server a
            # whole round trip apart there (ADR 0037, amendment).
            self._ahead_in_flight += 1
            self._background.start_soon(self._claim_ahead, granted)

    async def _claim_ahead(self, granted: int) -> None:
        try:
            await self._claim_batch(granted)
        finally:
            self._ahead_in_flight -= 1

    @property
    def _queue_key(self) -> metrics.Key:
        return ((metrics.ATTR_QUEUE, self.queue),)

    def _record_claim(self, claims: list[Claim], asked: int, seconds: float) -> None:
        assert self._instruments is not None
        self._instruments.claimed(
            self.queue,
            [(c.job.kind, c.shard) for c in claims],
            asked,
            seconds,
            [c.job.run_at for c in claims],
            self._clock.now(),
        )

    def _give_back(self, count: int) -> None:
        if count <= 0:
            return
        if self._bucket is not None:
            self._bucket.refund(count)
        # Unused permits must not wake this loop, or an empty queue would spin.
        self._permits.release(self.queue, count, wake_self=False)

    async def _release_unstarted(self, claims: list[Claim]) -> None:
        with anyio.CancelScope(shield=True):
            for claim in claims:
                try:
                    await self._engine.release(claim.lease, error=RELEASE_ON_STOP_ERROR)
                except Exception:
                    log.warning("job %s: release failed", claim.lease.job_id, exc_info=True)
                finally:
                    self._permits.release(self.queue, 1, wake_self=False)


def _rate_text(limit: GlobalRateLimit | None) -> str:
    return "None" if limit is None else f"{limit.rate:g}/s burst {limit.burst}"
