"""Stop a handler at its deadline, in the process that runs it.

The maintenance leader's deadline rescue frees a job whose attempt outlived
``deadline_duration_ms``, but by itself it leaves the handler running beside the next
attempt, holding a permit of its queue. :class:`DeadlineWatch` ends the attempt where it
runs:

* at the deadline every attempt's ``is_cancelled()`` turns true, and an async handler is
  cancelled (its cancel scope);
* a sync handler cannot be interrupted: it gets :data:`SYNC_DEADLINE_GRACE` more seconds
  to notice ``is_cancelled()`` and return; after that its thread is abandoned with a
  WARNING;
* either way the executor records the attempt as the rescue would (a failed attempt,
  "deadline exceeded", retried with backoff or failed when it was the last) and the
  permit goes back to the queue, so its concurrency is not silently reduced.

An attempt parked in ``wait_for_callback`` is not stopped: while it waits it is not
running, and the callback's timeout decides the job.

One task watches every attempt of the runtime: it sleeps on the runtime's clock until the
earliest deadline among the attempts in flight, and is woken early only when an attempt
starts with a deadline before that. Arming an attempt costs two clock readings, not a
timer of its own.
"""

from __future__ import annotations

import logging
import math

import anyio

from awa.ports.clock import Clock
from awa.runtime.context import AttemptContext
from awa.runtime.inflight import InFlight

log = logging.getLogger("awa.runtime.deadlines")

#: How long a sync handler may run past its deadline, told through ``is_cancelled()``,
#: before its attempt is recorded as failed and its thread abandoned.
SYNC_DEADLINE_GRACE = 5.0


class DeadlineWatch:
    """The runtime's one watcher of attempt deadlines (see the module docstring)."""

    def __init__(
        self, inflight: InFlight, clock: Clock, *, grace: float = SYNC_DEADLINE_GRACE
    ) -> None:
        self._inflight = inflight
        self._clock = clock
        self._grace = grace
        self._target = math.inf
        self._wake: anyio.Event | None = None

    def arm(self, context: AttemptContext) -> None:
        """Note ``context``'s deadline (on the event loop, as the attempt starts)."""
        due_at = context.claim.deadline_at
        if due_at is None:
            return
        clock = self._clock
        due = clock.monotonic() + (due_at - clock.now()).total_seconds()
        context.deadline_due = due
        if due < self._target:
            self._target = due
            if self._wake is not None:
                self._wake.set()

    async def run(self) -> None:
        """Stop attempts as their deadlines pass, until cancelled."""
        clock = self._clock
        while True:
            self._wake = wake = anyio.Event()
            now = clock.monotonic()
            target = math.inf
            for context in self._inflight.snapshot():
                due = context.deadline_due
                if due is None or context.parked:
                    continue
                if due <= now:
                    self._reached(context)
                    due = context.deadline_due
                    if due is None:
                        continue
                target = min(target, due)
            self._target = target
            with clock.move_on_after(target - now):
                await wake.wait()

    def _reached(self, context: AttemptContext) -> None:
        """``context``'s deadline (or its sync grace) has passed."""
        context.request_cancel()
        if context.cancel_scope is None:
            # The handler already returned; its outcome is being recorded.
            context.deadline_due = None
            return
        if context.in_thread and not context.deadline_warned:
            # A sync handler sees is_cancelled() now; it is cut off after the grace.
            context.deadline_warned = True
            context.deadline_due = (context.deadline_due or 0.0) + self._grace
            log.info(
                "job %s (%s): deadline reached; the sync handler is told through "
                "is_cancelled() and abandoned if it still runs in %.0f s",
                context.lease.job_id,
                context.record.kind,
                self._grace,
            )
            return
        context.deadline_due = None
        context.deadline_hit = True
        context.cancel_scope.cancel()
