"""Trace propagation across the queue, through ``opentelemetry-api`` when installed.

At enqueue the current span's W3C ``traceparent`` is stored in the job's metadata under
``awa:traceparent`` (unless the caller set one; ``AWA_TRACE_CAPTURE=off`` turns capture
off), inside a producer span ``send {queue}``. At execution a consumer span
``job.execute {kind}`` is started: the first attempt joins the producer's trace as its
child; a later attempt starts a new root with a link to the enqueue, so a retry hours
later neither stretches the original trace nor inherits its sampling decision. The
handler runs with the execution span as its ambient context.

Without ``opentelemetry-api`` every function here is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.domain.job import JobRecord

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    otel_trace = None  # type: ignore[assignment]

TRACEPARENT_KEY = "awa:traceparent"
CAPTURE_ENV = "AWA_TRACE_CAPTURE"
MESSAGING_SYSTEM = "awa"
_OFF = frozenset({"off", "0", "false", "no"})


def available() -> bool:
    """Whether ``opentelemetry-api`` is importable."""
    return otel_trace is not None


def capture_enabled() -> bool:
    """Trace capture at enqueue is on unless ``AWA_TRACE_CAPTURE`` says off."""
    return os.environ.get(CAPTURE_ENV, "on").strip().lower() not in _OFF


def _tracer() -> Any:
    assert otel_trace is not None
    return otel_trace.get_tracer("awa")


_recording = False
_checked_at = -1.0


def recording() -> bool:
    """Whether a real tracer provider is installed (the API's default records nothing,
    so spans would cost time and show nowhere). A provider can be installed once per
    process, so a positive answer is kept; a negative one is looked at again after a
    second (the lookup costs more than the rest of an attempt's tracing)."""
    global _recording, _checked_at
    if _recording or otel_trace is None:
        return _recording
    now = time.monotonic()
    if now - _checked_at >= 1.0:
        _checked_at = now
        provider = otel_trace.get_tracer_provider()
        _recording = not isinstance(provider, otel_trace.ProxyTracerProvider)
    return _recording


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or ``None`` outside a valid span."""
    if otel_trace is None:
        return None
    span_context = otel_trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags):02x}"
    )


def stamp(metadata: MutableMapping[str, Any]) -> None:
    """Store the current ``traceparent`` in ``metadata`` unless one is there already."""
    if otel_trace is None or TRACEPARENT_KEY in metadata or not capture_enabled():
        return
    traceparent = current_traceparent()
    if traceparent is not None:
        metadata[TRACEPARENT_KEY] = traceparent


@contextlib.contextmanager
def producer_span(queue: str, count: int = 1) -> Iterator[None]:
    """``send {queue}`` around an enqueue (a no-op without a tracer provider)."""
    if otel_trace is None or not recording() or not capture_enabled():
        yield
        return
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with _tracer().start_as_current_span(
        f"send {queue}", kind=otel_trace.SpanKind.PRODUCER, attributes=attributes
    ):
        yield


def _remote_context(traceparent: str) -> Any:
    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


@contextlib.contextmanager
def execution_span(record: JobRecord, queue: str) -> Iterator[Any]:
    """``job.execute {kind}``, current for the duration (the handler's ambient context).
    Yields the span, or ``None`` when tracing is unavailable."""
    if otel_trace is None:
        yield None
        return
    stored = record.metadata.get(TRACEPARENT_KEY)
    if not recording():
        # Nothing would record a span; the handler still runs in the producer's context
        # so that what it calls can propagate the trace.
        if isinstance(stored, str) and record.attempt <= 1:
            token = otel_context.attach(_remote_context(stored))
            try:
                yield None
            finally:
                otel_context.detach(token)
        else:
            yield None
        return
    parent: Any = otel_context.Context()  # a new root unless joining the producer
    links: list[Any] = []
    if isinstance(stored, str):
        remote = _remote_context(stored)
        remote_span = otel_trace.get_current_span(remote).get_span_context()
        if remote_span.is_valid:
            if record.attempt <= 1:
                parent = remote
            else:
                links.append(otel_trace.Link(remote_span, {"awa.link": "enqueue"}))
    attributes = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": str(record.id),
        "awa.job.kind": record.kind,
        "awa.job.queue": queue,
        "awa.job.attempt": record.attempt,
    }
    span = _tracer().start_span(
        f"job.execute {record.kind}",
        context=parent,
        kind=otel_trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    )
    with otel_trace.use_span(span, end_on_exit=True, record_exception=False):
        yield span


def mark_failed(span: Any, failure: BaseException | None, error: str | None) -> None:
    """Record a handler's failure on its execution span."""
    if otel_trace is None or span is None:
        return
    if failure is not None:
        span.record_exception(failure)
    span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
