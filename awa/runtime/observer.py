"""What the executor reports when an attempt ends: one log record, the job metrics and
the execution span. One object so the executor has a single hook."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from awa.domain.outcomes import FailOutcome, Outcome
from awa.ports.storage import StorageEngine
from awa.runtime import metrics, tracing
from awa.runtime.context import AttemptContext
from awa.runtime.handlers import HandlerRegistry
from awa.runtime.outcome_log import (
    RELEASED,
    TERMINAL_FAILURES,
    log_dlq_moved,
    log_outcome,
    outcome_name,
)

log = logging.getLogger("awa.runtime.observer")


class AttemptObserver:
    """Logs each outcome and, when ``opentelemetry-api`` is installed, records metrics
    and the ``job.execute`` span."""

    def __init__(self, handlers: HandlerRegistry) -> None:
        self._handlers = handlers
        self._instruments = metrics.instruments()
        #: Whether :meth:`execution_span` does anything (checked per attempt).
        self.tracing = tracing.available()

    def traced(self, context: AttemptContext) -> bool:
        """Whether this attempt needs :meth:`execution_span`: a tracer provider records
        spans, or the job carries a producer context for the handler to run in."""
        return tracing.recording() or tracing.TRACEPARENT_KEY in context.record.metadata

    @contextlib.contextmanager
    def execution_span(self, context: AttemptContext) -> Iterator[None]:
        """The handler's ambient trace context; the span notes a failure."""
        with tracing.execution_span(context.record, context.queue) as span:
            try:
                yield
            finally:
                if context.failure is not None:
                    tracing.mark_failed(span, context.failure, str(context.failure))

    def finished(
        self,
        context: AttemptContext,
        outcome: Outcome | None,
        duration: float,
        *,
        released: bool = False,
    ) -> None:
        """Log and count how the attempt ended (``None``: no longer this worker's;
        ``released``: given back unfinished at shutdown)."""
        try:
            self._report(context, outcome, duration, released=released)
        except Exception:
            # Reporting must never keep an outcome from being recorded.
            log.warning("reporting job %s's outcome failed", context.lease.job_id, exc_info=True)

    async def recorded(
        self, engine: StorageEngine, context: AttemptContext, outcome: Outcome
    ) -> None:
        """The engine applied ``outcome``. A job that ended failed may have gone into the
        DLQ instead: the engine decides that from the queue's DLQ setting, so read the
        entry, log where the job went and how to retry it from there, and (when metrics
        record) count ``awa.job.dlq_moved`` with its reason. One read per terminal
        failure."""
        if self._name(context, outcome) not in TERMINAL_FAILURES:
            return
        job_id = context.lease.job_id
        try:
            entry = await engine.get_dlq(job_id)
        except Exception:
            log.debug("job %s: DLQ read failed", job_id, exc_info=True)
            return
        if entry is None or entry.original_run_lease != context.lease.lease:
            return
        log_dlq_moved(entry.job, context.queue, entry.reason)
        instruments = self._instruments
        if instruments is not None:
            instruments.dlq(
                "awa.job.dlq_moved",
                1,
                queue=context.queue,
                kind=context.record.kind,
                reason=entry.reason,
            )

    def _name(self, context: AttemptContext, outcome: Outcome | None) -> str:
        record = context.record
        return outcome_name(
            record,
            outcome,
            unknown_kind=isinstance(outcome, FailOutcome) and record.kind not in self._handlers,
            policies=self._handlers.policies,
        )

    def _report(
        self, context: AttemptContext, outcome: Outcome | None, duration: float, *, released: bool
    ) -> None:
        record = context.record
        name = RELEASED if released else self._name(context, outcome)
        log_outcome(
            record,
            context.queue,
            outcome,
            name,
            duration,
            context.failure,
            policies=self._handlers.policies,
        )
        instruments = self._instruments
        if instruments is not None:
            instruments.job_outcome(name, record.kind, context.queue, duration)
