"""Run one claimed attempt: build the job, call the handler, finalize the outcome."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from awa.domain import batches
from awa.domain.dependencies import PARENTS_METADATA
from awa.domain.errors import DatabaseError, UnknownJobKind
from awa.domain.lifecycle import Rescue
from awa.domain.outcomes import (
    CancelOutcome,
    Complete,
    FailOutcome,
    Outcome,
    RetryAfterOutcome,
    RetryWithBackoff,
    SnoozeOutcome,
    WaitForCallbackOutcome,
)
from awa.domain.results import encode_result
from awa.domain.validation import storable_text
from awa.ports.clock import Clock
from awa.ports.relations import JobRelations
from awa.ports.results import ResultStore
from awa.ports.storage import Ack, StorageEngine
from awa.runtime.completion import CompletionBatcher
from awa.runtime.context import AttemptContext, AttemptLost
from awa.runtime.handlers import HandlerEntry, HandlerRegistry
from awa.runtime.observer import AttemptObserver
from awa.runtime.outcome_mapping import (
    describe_exception,
    outcome_for_exception,
    outcome_for_result,
)

log = logging.getLogger("awa.runtime.executor")

SHUTDOWN_RELEASE_ERROR = "worker shutting down"
_APPLY_ATTEMPTS = 5


class Executor:
    """Executes attempts. ``on_handler_done`` runs once the handler has returned and no
    longer needs its permit: for a successful attempt as soon as its completion is queued
    in the batcher (the flush is then shared with other attempts while the permit and the
    task already run the next job), otherwise after the outcome is recorded.
    ``on_finished`` runs after the outcome is acknowledged (or given up on); the attempt is
    live until then. For a completion it is called by the batcher right after its flush."""

    def __init__(
        self,
        engine: StorageEngine,
        handlers: HandlerRegistry,
        batcher: CompletionBatcher,
        *,
        clock: Clock,
        thread_limiter: anyio.CapacityLimiter,
        on_finished: Callable[[AttemptContext], None],
        on_handler_done: Callable[[AttemptContext], None] | None = None,
        observer: AttemptObserver | None = None,
        results: ResultStore | None = None,
        relations: JobRelations | None = None,
    ) -> None:
        self._engine = engine
        #: where a batch's callback reads its counts (the backend's control plane)
        self._relations = relations
        #: where the tasks that store results put them (the backend's control plane)
        self._results = results
        self._handlers = handlers
        self._batcher = batcher
        self._clock = clock
        self._limiter = thread_limiter
        self._on_finished = on_finished
        self._on_handler_done = on_handler_done
        self._scope_type: Callable[[], anyio.CancelScope] | None = None
        self._observer = observer or AttemptObserver(handlers)
        #: Reads behind refusal records still running (kept so they are not collected).
        self._refusals: set[asyncio.Task[None]] = set()

    async def execute(self, context: AttemptContext) -> None:
        handed_over = False
        observer = self._observer
        started = time.perf_counter()
        try:
            if observer.tracing and observer.traced(context):
                with observer.execution_span(context):
                    outcome = await self._run_handler(context)
            else:
                outcome = await self._run_handler(context)
            observer.finished(
                context,
                None if isinstance(outcome, _Release) else outcome,
                time.perf_counter() - started,
                released=isinstance(outcome, _Release),
            )
            if isinstance(outcome, Complete):
                on_ack = functools.partial(self._completed, context)
                if self._batcher.try_submit(context.lease, on_ack) is None:
                    with anyio.CancelScope(shield=True):
                        await self._batcher.submit(context.lease, on_ack)
                handed_over = True
                if self._on_handler_done is not None:
                    self._on_handler_done(context)
            elif outcome is not None:
                with anyio.CancelScope(shield=True):
                    await self._finalize(context, outcome)
                    if self._stores_result(context):
                        # A waiter re-reads the job: failed, cancelled or back in line.
                        await self._announce(context)
        finally:
            if not handed_over:
                self._on_finished(context)

    def _stores_result(self, context: AttemptContext) -> bool:
        entry = self._handlers.get(context.record.kind)
        return entry is not None and entry.result_encoder is not None

    async def _announce(self, context: AttemptContext, *, completed: bool = False) -> None:
        """Wake the waiters on this job (best effort: they poll as well); ``completed``
        once its completion was acknowledged (committed)."""
        if self._results is None:
            return
        try:
            await self._results.announce_finished(context.lease.job_id, completed=completed)
        except Exception:
            log.debug("job %s: result announcement failed", context.lease.job_id)

    def _completed(self, context: AttemptContext, ack: Ack) -> None:
        """The batcher acknowledged this attempt's completion: it is over."""
        if ack is Ack.APPLIED and self._stores_result(context) and _on_asyncio():
            task = asyncio.get_running_loop().create_task(self._announce(context, completed=True))
            self._refusals.add(task)
            task.add_done_callback(self._refusals.discard)
        if ack is Ack.STALE:
            if _on_asyncio():
                # Called from the batcher's flush: the current lease is read on the side.
                task = asyncio.get_running_loop().create_task(
                    self._log_refused(context, "Complete")
                )
                self._refusals.add(task)
                task.add_done_callback(self._refusals.discard)
            else:
                _refusal_record(context, "Complete", "not read")
        self._on_finished(context)

    async def _log_refused(self, context: AttemptContext, what: str) -> None:
        """One INFO record for an outcome the run-lease guard refused: the attempt's lease
        and the one the job holds now (another attempt's after a rescue, or none)."""
        try:
            current = await self._engine.get_job(context.lease.job_id)
        except Exception as exc:  # the record matters more than the detail
            now = f"unknown ({type(exc).__name__})"
        else:
            now = (
                "gone"
                if current is None
                else f"{current.run_lease} (state {current.state}, attempt {current.attempt})"
            )
        _refusal_record(context, what, now)

    async def _run_handler(self, context: AttemptContext) -> Outcome | _Release | None:
        """The outcome to record, or ``None`` when the attempt is no longer ours."""
        entry = self._handlers.get(context.record.kind)
        if entry is None:
            return FailOutcome(error=str(UnknownJobKind(context.record.kind)))
        if self._relations is not None and batches.is_callback(context.record.metadata):
            try:
                context.batch = await self._relations.parent_counts(context.lease.job_id)
            except Exception as exc:
                return RetryWithBackoff(error=f"could not read the batch's counts: {exc}")
        parents = context.record.metadata.get(PARENTS_METADATA)
        if parents:
            unread = await self._read_parent_results(context, parents)
            if unread is not None:
                return unread
        try:
            job = entry.job_factory(context.record, context)
        except BaseException as exc:
            if _is_runtime_cancellation(exc, None):
                raise
            # Arguments that cannot be rebuilt will not deserialize on a retry either.
            context.failure = exc
            return FailOutcome(error=describe_exception(exc, with_traceback=False))
        if self._scope_type is None:
            # anyio.CancelScope() looks the event loop's backend up on every call (about
            # 5 % of a drain's worker CPU); the backend's own class is built directly.
            self._scope_type = type(anyio.CancelScope())
        scope = self._scope_type()
        context.cancel_scope = scope
        context.in_thread = not entry.is_async
        result: Any = None
        failure: BaseException | None = None
        with scope:
            try:
                result = await self._call(entry, job)
            except AttemptLost as exc:
                log.debug("job %s: %s", context.lease.job_id, exc)
                return None
            except Exception as exc:
                failure = exc
            except BaseException as exc:
                # CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit or a custom
                # BaseException raised BY THE HANDLER is that job's failure, not the
                # worker's: letting it through would end the runtime (and the job, rescued
                # onto the next worker, would end that one too). Only a cancellation the
                # runtime itself delivered (this attempt's scope, or the task's own
                # cancellation at shutdown) goes on.
                if _is_runtime_cancellation(exc, scope):
                    raise
                log.warning(
                    "job %s: handler raised %s, recorded as a failed attempt",
                    context.lease.job_id,
                    type(exc).__name__,
                )
                failure = exc
        context.cancel_scope = None
        if scope.cancelled_caught:
            if context.deadline_hit:
                return _deadline_exceeded(context)
            return None if context.left_parked else _Release()
        if failure is not None:
            context.failure = failure
            return outcome_for_exception(failure)
        outcome = outcome_for_result(result, self._clock.now())
        if isinstance(outcome, Complete) and entry.result_encoder is not None:
            return await self._store_result(context, entry, result) or outcome
        return outcome

    async def _read_parent_results(self, context: AttemptContext, parents: Any) -> Outcome | None:
        """Read the stored results of the job's parents into ``context.parent_results``
        (``job.parent_results``), each rebuilt by the decoder of its kind's task when
        this process registered one; the outcome to record instead when the store did
        not answer (a retry) or a result does not fit its type (a failure)."""
        if self._results is None or not isinstance(parents, list):
            return None
        ids = [p for p in parents if isinstance(p, int) and not isinstance(p, bool)]
        # Asked all at once: a store answers reads asked together in one statement, so a
        # join of a hundred parents reads them in one round trip, not a hundred.
        answers = await asyncio.gather(
            *(self._results.get_result(parent) for parent in ids), return_exceptions=True
        )
        found: dict[int, Any] = {}
        for parent, stored in zip(ids, answers, strict=True):
            if isinstance(stored, BaseException):
                if not isinstance(stored, Exception):
                    raise stored
                return RetryWithBackoff(
                    error=f"could not read the result of job {parent}: {stored}"
                )
            if stored is None:
                continue
            owner = None if stored.kind is None else self._handlers.get(stored.kind)
            decode = None if owner is None else owner.result_decoder
            try:
                found[parent] = stored.value if decode is None else decode(stored.value)
            except Exception as exc:
                context.failure = exc
                return FailOutcome(
                    error=f"the result of job {parent} does not fit its task's type: "
                    + describe_exception(exc, with_traceback=False)
                )
        context.parent_results = found
        return None

    async def _store_result(
        self, context: AttemptContext, entry: HandlerEntry, result: Any
    ) -> Outcome | None:
        """Store the completed attempt's result before its completion is recorded (so a
        completed job of the task always has one); the outcome to record instead when it
        cannot be: a failure for a result that is not storable (too large, not JSON), a
        retry when the store did not answer."""
        assert entry.result_encoder is not None
        try:
            text = encode_result(entry.result_encoder(result))
        except Exception as exc:
            context.failure = exc
            return FailOutcome(error=describe_exception(exc, with_traceback=False))
        if self._results is None:
            return FailOutcome(error="this runtime has no result store to store the result in")
        try:
            await self._results.store_result(context.lease.job_id, text, kind=entry.kind)
        except Exception as exc:
            return RetryWithBackoff(error=f"could not store the result: {exc}")
        return None

    async def _call(self, entry: HandlerEntry, job: Any) -> Any:
        if entry.is_async:
            return await entry.handler(job)
        try:
            result = await anyio.to_thread.run_sync(
                _carry_base_exceptions,
                entry.handler,
                job,
                limiter=self._limiter,
                abandon_on_cancel=True,
            )
        except _Carried as carried:
            raise carried.exc from None
        if hasattr(result, "__await__"):
            result = await result
        return result

    async def _finalize(self, context: AttemptContext, outcome: Outcome | _Release) -> None:
        # Progress survives retries, so persist what the handler buffered first.
        try:
            await context.flush_progress()
        except Exception:
            log.debug("job %s: progress flush before finalize failed", context.lease.job_id)
        delay = 0.05
        fell_back = False
        for attempt in range(_APPLY_ATTEMPTS):
            try:
                ack = await self._apply(context, outcome)
            except Exception as exc:
                unstorable = not isinstance(exc, DatabaseError)
                if unstorable or attempt == _APPLY_ATTEMPTS - 1:
                    fallback = None if fell_back else _fallback_for(outcome, exc)
                    if fallback is not None:
                        # The outcome itself cannot be stored (a value out of range):
                        # record that, with the reason, rather than leave the job running
                        # until the heartbeat rescue with only "heartbeat stale" to show.
                        log.error(
                            "job %s: could not record %s (%s); recording a failed attempt",
                            context.lease.job_id,
                            type(outcome).__name__,
                            exc,
                        )
                        outcome, fell_back = fallback, True
                        continue
                    log.error(
                        "job %s: could not record %s; the attempt will be rescued",
                        context.lease.job_id,
                        type(outcome).__name__,
                        exc_info=True,
                    )
                    return
                await self._clock.sleep(delay)
                delay *= 2
                continue
            if ack is Ack.STALE:
                await self._log_refused(context, type(outcome).__name__)
            elif not isinstance(outcome, _Release):
                await self._observer.recorded(self._engine, context, outcome)
            return

    async def _apply(self, context: AttemptContext, outcome: Outcome | _Release) -> Ack:
        lease = context.lease
        engine = self._engine
        match outcome:
            case RetryAfterOutcome(delay=delay, error=error):
                return await engine.retry(lease, error=error, delay=delay)
            case RetryWithBackoff(error=error):
                return await engine.retry(lease, error=error)
            case SnoozeOutcome(delay=delay):
                return await engine.snooze(lease, delay=delay)
            case CancelOutcome(reason=reason):
                return await engine.cancel_attempt(lease, reason=reason)
            case FailOutcome(error=error):
                return await engine.fail(lease, error=error)
            case WaitForCallbackOutcome():
                return await engine.wait_for_callback(lease)
            case _Release():
                return await engine.release(lease, error=SHUTDOWN_RELEASE_ERROR)
        raise AssertionError(f"unhandled outcome {outcome!r}")


def _deadline_exceeded(context: AttemptContext) -> Outcome:
    """The deadline watch cut the handler off: record the attempt as the leader's
    deadline rescue would (awa.runtime.deadlines)."""
    lease = context.lease
    if context.in_thread:
        log.warning(
            "job %s (%s): sync handler still running past its deadline "
            "(deadline_duration_ms of queue %s) and its grace, though is_cancelled() was "
            "true; its thread is abandoned and the attempt recorded as failed. Check "
            "job.is_cancelled() in long loops so the handler can stop",
            lease.job_id,
            context.record.kind,
            context.queue,
        )
    else:
        log.warning(
            "job %s (%s): handler cancelled at its deadline (deadline_duration_ms of queue "
            "%s); the attempt is recorded as failed",
            lease.job_id,
            context.record.kind,
            context.queue,
        )
    return RetryWithBackoff(error=Rescue.DEADLINE_EXCEEDED.error)


def _fallback_for(outcome: Outcome | _Release, exc: Exception) -> Outcome | None:
    """What to record when ``outcome`` could not be: a failed attempt naming why
    (``None`` for a release, which the rescue takes over)."""
    if isinstance(outcome, _Release):
        return None
    error = storable_text(
        f"the handler's outcome {type(outcome).__name__} could not be recorded: "
        f"{type(exc).__name__}: {exc}"
    )
    if isinstance(outcome, FailOutcome):
        return FailOutcome(error=error)
    return RetryWithBackoff(error=error)


class _Carried(Exception):
    """A BaseException a sync handler raised in its worker thread, carried to the loop.

    Delivered through a future, a ``GeneratorExit`` would be thrown into the task in a
    way that closes every coroutine awaiting it rather than reaching their ``except``
    clauses; wrapped, it arrives as an ordinary exception and is re-raised on the loop."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(repr(exc))
        self.exc = exc


def _carry_base_exceptions(handler: Callable[[Any], Any], job: Any) -> Any:
    try:
        return handler(job)
    except Exception:
        raise
    except BaseException as exc:
        raise _Carried(exc) from None


def _is_runtime_cancellation(exc: BaseException, scope: anyio.CancelScope | None) -> bool:
    """Whether ``exc`` is a cancellation the runtime delivered, as opposed to one the
    handler raised (``raise asyncio.CancelledError()``, awaiting a cancelled future).

    The runtime cancels an attempt through its cancel scope (shutdown, deadline, an
    operator's cancel) or cancels the whole task (the runtime's task group is torn down);
    either leaves a mark a handler-raised ``CancelledError`` does not have."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    if scope is not None and scope.cancel_called:
        return True
    task = asyncio.current_task() if _on_asyncio() else None
    if task is None:
        # Another backend (trio): its cancellations come only from cancel scopes, which
        # anyio tracks; a handler cannot raise one of its own.
        return True
    return task.cancelling() > 0 or _enclosing_scope_cancelled()


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _enclosing_scope_cancelled() -> bool:
    """An anyio scope around this task was cancelled (the runtime is stopping)."""
    try:
        deadline = anyio.current_effective_deadline()
    except Exception:
        return False
    return deadline == -math.inf


class _Release:
    """Internal outcome: give the attempt back unspent (shutdown interrupted it)."""


def _refusal_record(context: AttemptContext, what: str, now: str) -> None:
    lease = context.lease
    log.info(
        "job %s: %s refused by the run-lease guard: this attempt held run lease %s, "
        "the job's run lease is now %s",
        lease.job_id,
        what,
        lease.lease,
        now,
        extra={"job_id": lease.job_id, "stale_run_lease": lease.lease, "outcome": what},
    )
