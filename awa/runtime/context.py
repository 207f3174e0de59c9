"""Per-attempt state shared by the executor, the heartbeat service and the handler."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import timedelta
from typing import Any

import anyio
import anyio.from_thread

from awa.domain.batches import BatchCounts
from awa.domain.callbacks import CallbackExpressions
from awa.domain.errors import AwaError
from awa.domain.handler_results import CallbackToken
from awa.domain.job import Claim, JobRecord, RunLease
from awa.domain.lifecycle import CALLBACK_RESULT_KEY
from awa.domain.states import JobState
from awa.domain.validation import MAX_DELAY_SECONDS, validate_json, validate_number
from awa.ports.clock import Clock
from awa.ports.storage import Ack, StorageEngine


class AttemptLost(AwaError):
    """The attempt is no longer ours (rescued, cancelled or resolved elsewhere).

    Raised out of context operations that cannot continue; the executor treats it as
    "nothing to finalize" rather than as a handler failure.
    """


class AttemptContext:
    """What the runtime knows about one running attempt.

    Methods are safe to call from a sync handler's worker thread, except the ``async``
    ones, which must run on the event loop (``flush_progress_sync`` bridges to it).
    """

    def __init__(
        self,
        engine: StorageEngine,
        claim: Claim,
        *,
        queue: str,
        clock: Clock,
        callback_poll_interval: float = 0.2,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.claim = claim
        self.queue = queue
        self.callback_poll_interval = callback_poll_interval
        self.cancel_scope: anyio.CancelScope | None = None
        #: the task running the handler (the loop watchdog names it when it blocks)
        self.task: asyncio.Task[Any] | None = None
        # Set once the handler's permit went back to its queue (see Runtime).
        self.permit_returned = False
        # A plain flag: set from any thread (a heartbeat answering a cancel, shutdown),
        # read by the handler; assigning a bool is atomic.
        self._cancelled = False
        self._lock = threading.Lock()
        # A job that never reported progress shows none, as opposed to 0 %.
        self._reported = claim.job.progress is not None
        # The progress buffer, built from the claimed job's on first use (under the lock):
        # most attempts never report progress, and building it for each cost about 2 % of
        # a drain's worker CPU.
        self._buffer: dict[str, Any] | None = None
        self._dirty = False
        self._background_flushes: set[asyncio.Task[None]] | None = None
        self.callback_id: str | None = None
        # Tokens already waited on: each resume ends its callback.
        self._waited: set[str] | None = None
        # While parked in waiting_external the attempt is not "running": heartbeats
        # would report it stale, so the heartbeat service skips it.
        self.parked = False
        self.left_parked = False
        # The exception the handler (or building its job) raised, for the outcome log.
        self.failure: BaseException | None = None
        # Deadline enforcement (awa.runtime.deadlines): when the watch acts next on this
        # runtime's monotonic clock, whether the handler runs in a thread, whether a sync
        # handler was already told, and whether the deadline cut the handler off.
        self.deadline_due: float | None = None
        self.in_thread = False
        self.deadline_warned = False
        self.deadline_hit = False
        #: The stored results of the job's parents by parent id (``job.parent_results``),
        #: read before the handler runs.
        self.parent_results: dict[int, Any] = {}
        #: A batch's counts when the job is its callback (``job.batch``), read before the
        #: handler runs (ADR 0035).
        self.batch: BatchCounts | None = None

    # ------------------------------------------------------------------ identity
    @property
    def lease(self) -> RunLease:
        return self.claim.lease

    @property
    def record(self) -> JobRecord:
        """The job as claimed (``running``, attempt already incremented)."""
        return self.claim.job

    # ------------------------------------------------------------------ cancellation
    def is_cancelled(self) -> bool:
        """True once the attempt was cancelled, rescued, reached its deadline, or the
        runtime is shutting down."""
        return self._cancelled

    def request_cancel(self) -> None:
        self._cancelled = True

    # ------------------------------------------------------------------ progress
    @property
    def _progress(self) -> dict[str, Any]:
        """The progress buffer (call with the lock held)."""
        if self._buffer is None:
            previous = self.claim.job.progress or {}
            self._buffer = {
                "percent": previous.get("percent", 0),
                "message": previous.get("message"),
                "metadata": dict(previous.get("metadata") or {}),
            }
        return self._buffer

    def set_progress(self, percent: int, message: str | None = None) -> None:
        """Buffer progress (``percent`` clamped to 0..100); flushed on the next heartbeat."""
        if isinstance(percent, bool) or not isinstance(percent, int | float):
            raise TypeError(f"percent must be an integer, got {type(percent).__name__}")
        if message is not None and not isinstance(message, str):
            raise TypeError(f"message must be a string, got {type(message).__name__}")
        if message is not None:
            validate_json("progress.message", message)
        with self._lock:
            self._progress["percent"] = max(0, min(100, int(percent)))
            self._progress["message"] = message
            self._dirty = self._reported = True

    def update_metadata(self, updates: dict[str, Any]) -> None:
        """Shallow-merge ``updates`` into the progress metadata (buffered)."""
        if not isinstance(updates, dict):
            raise TypeError(f"updates must be a dict, got {type(updates).__name__}")
        # Refused here, where the handler hands the value over: buffered, it would only
        # fail at the next flush, long after, and be lost.
        validate_json("progress.metadata", updates)
        with self._lock:
            self._progress["metadata"].update(updates)
            self._dirty = self._reported = True

    @property
    def progress(self) -> dict[str, Any] | None:
        """The current progress, including buffered changes not yet flushed, as the
        handler sees it: ``percent``, plus ``message`` and ``metadata`` when set; ``None``
        while the job has reported nothing."""
        with self._lock:
            if not self._reported:
                return None
            view: dict[str, Any] = {"percent": self._progress["percent"]}
            if self._progress["message"] is not None:
                view["message"] = self._progress["message"]
            if self._progress["metadata"]:
                view["metadata"] = dict(self._progress["metadata"])
            return view

    def take_dirty_progress(self) -> dict[str, Any] | None:
        """The buffered progress if it changed since the last flush, clearing the flag."""
        with self._lock:
            if not self._dirty:
                return None
            self._dirty = False
            return _copy_progress(self._progress)

    def mark_progress_dirty(self) -> None:
        """A flush failed: keep the buffer so the next tick tries again."""
        with self._lock:
            self._dirty = True

    async def flush_progress(self, engine: StorageEngine | None = None) -> None:
        """Persist buffered progress now. A stale lease flips the cancel flag."""
        snapshot = self.take_dirty_progress()
        if snapshot is None:
            return
        try:
            ack = await (engine or self.engine).update_progress(self.lease, progress=snapshot)
        except BaseException:
            self.mark_progress_dirty()
            raise
        if ack is Ack.STALE:
            self.request_cancel()

    def flush_progress_sync(self) -> None:
        """:meth:`flush_progress` for sync handlers running in a worker thread.

        Called on the event loop itself (from an ``async`` handler), it cannot block the
        loop it needs: it starts the flush in the background and returns."""
        try:
            anyio.from_thread.run(self.flush_progress)
        except RuntimeError:
            # No worker-thread portal: this is the event loop thread.
            if self._background_flushes is None:
                self._background_flushes = set()
            self._background_flushes.add(
                task := asyncio.get_running_loop().create_task(self.flush_progress())
            )
            task.add_done_callback(self._background_flushes.discard)

    # ------------------------------------------------------------------ callbacks
    async def register_callback(
        self, timeout_seconds: float = 3600.0, expressions: CallbackExpressions | None = None
    ) -> CallbackToken:
        """Attach a fresh external callback id (with its checked CEL ``expressions``) to
        this attempt."""
        timeout_seconds = validate_number(
            "timeout_seconds", timeout_seconds, positive=True, maximum=MAX_DELAY_SECONDS
        )

        callback_id = str(uuid.uuid4())
        ack = await self.engine.register_callback(
            self.lease,
            callback_id=callback_id,
            timeout=timedelta(seconds=timeout_seconds),
            expressions=expressions,
        )
        if ack is Ack.STALE:
            self.request_cancel()
            raise AttemptLost(f"job {self.lease.job_id}: attempt is no longer running")
        self.callback_id = callback_id
        return CallbackToken(callback_id)

    async def _early_resume(self) -> Any:
        """The payload of a resume that arrived before the wait (the attempt still runs and
        its callback already ended with a result), or ``_NO_RESUME``."""
        record = await self.engine.get_job(self.lease.job_id)
        if (
            record is not None
            and record.run_lease == self.lease.lease
            and record.state == JobState.Running
            and record.callback_id is None
            and CALLBACK_RESULT_KEY in record.metadata
        ):
            return record.metadata[CALLBACK_RESULT_KEY]
        return _NO_RESUME

    async def wait_for_callback(self, token: CallbackToken) -> Any:
        """Park the attempt in ``waiting_external`` and wait until the callback resumes it;
        returns the resume payload. If the callback completes, fails or times out the job
        instead, raises :class:`AttemptLost` (the job's fate was decided elsewhere)."""
        if self.callback_id is not None and token.id != self.callback_id:
            raise ValueError(f"callback token {token.id!r} was not registered by this attempt")
        if self._waited is None:
            self._waited = set()
        if token.id in self._waited:
            raise ValueError(
                f"callback token {token.id!r} was already waited on; register a new callback"
            )
        self._waited.add(token.id)
        self.parked = True
        try:
            ack = await self.engine.wait_for_callback(self.lease)
            if ack is Ack.STALE:
                early = await self._early_resume()
                if early is not _NO_RESUME:
                    return early
                self.request_cancel()
                raise AttemptLost(f"job {self.lease.job_id}: attempt is no longer running")
            while True:
                record = await self.engine.get_job(self.lease.job_id)
                if record is None or record.run_lease != self.lease.lease:
                    break
                if record.state == JobState.Running:
                    return record.metadata.get(CALLBACK_RESULT_KEY)
                if record.state != JobState.WaitingExternal:
                    break
                await self.clock.sleep(self.callback_poll_interval)
        except anyio.get_cancelled_exc_class():
            # Interrupted (shutdown) while parked: the job stays waiting for its
            # callback instead of being released.
            self.left_parked = True
            raise
        finally:
            self.parked = False
        self.request_cancel()
        raise AttemptLost(f"job {self.lease.job_id}: callback resolved without resuming")


_NO_RESUME = object()


def _copy_progress(progress: dict[str, Any]) -> dict[str, Any]:
    return {
        "percent": progress["percent"],
        "message": progress["message"],
        "metadata": dict(progress["metadata"]),
    }
