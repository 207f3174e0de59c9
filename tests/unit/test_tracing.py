"""Trace propagation: enqueue and execute in one trace, retries as linked new roots."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from awa.adapters.clock import ManualClock
from awa.entrypoints.args import build_spec
from awa.entrypoints.job import Job
from awa.runtime import AttemptContext, HandlerRegistry, tracing
from tests.unit.test_runtime_support import make_engine, running, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

_EXPORTER = InMemorySpanExporter()


def _reset_tracer_provider() -> None:
    """Forget the global tracer provider. The API sets it once per process and offers no
    reset; without this, every later test in the process would trace its inserts (and
    find ``awa:traceparent`` in metadata it compares exactly)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    tracing._recording = False
    tracing._checked_at = -1.0  # look the provider up again now


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    _reset_tracer_provider()
    trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    try:
        yield _EXPORTER
    finally:
        provider.shutdown()
        _reset_tracer_provider()
        assert not tracing.recording()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_enqueue_and_execute_share_a_trace_and_a_retry_is_linked(
    spans: InMemorySpanExporter,
) -> None:
    clock = ManualClock()
    engine = make_engine(clock)
    handlers = HandlerRegistry()
    ambient: list[tuple[int, int]] = []

    def handler(ctx: AttemptContext) -> None:
        # A sync handler runs in a thread: the context must have followed it there.
        current = trace.get_current_span().get_span_context()
        ambient.append((current.trace_id, current.span_id))
        if ctx.record.attempt == 1:
            raise RuntimeError("first attempt fails")

    handlers.register("traced", handler)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request, tracing.producer_span("default"):
        spec = build_spec({"n": 1}, kind="traced", max_attempts=3)
    stored = spec.metadata[tracing.TRACEPARENT_KEY]
    [record] = await engine.enqueue_many([spec])
    assert Job(record).traceparent == stored
    async with running(engine, handlers):
        await wait_until(lambda: len(_named(spans, "job.execute traced")) == 1)
        clock.advance(timedelta(hours=1))  # past the retry's backoff
        await wait_until(lambda: len(_named(spans, "job.execute traced")) == 2, timeout=10)

    (send,) = _named(spans, "send default")
    assert send.kind is trace.SpanKind.PRODUCER
    assert send.attributes is not None and send.attributes["messaging.system"] == "awa"
    assert send.context is not None and send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert stored.startswith(f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-")

    first, retry = sorted(_named(spans, "job.execute traced"), key=lambda s: s.start_time or 0)
    assert first.kind is trace.SpanKind.CONSUMER
    assert first.attributes is not None and first.attributes["messaging.system"] == "awa"
    assert first.parent is not None and first.parent.span_id == send.context.span_id
    assert first.context is not None and first.context.trace_id == send.context.trace_id
    assert first.status.status_code is trace.StatusCode.ERROR
    assert retry.context is not None and retry.context.trace_id != send.context.trace_id
    assert retry.parent is None
    (link,) = retry.links
    assert link.context.span_id == send.context.span_id
    # The handler saw its execution span as the ambient span.
    assert ambient[0] == (first.context.trace_id, first.context.span_id)
    assert ambient[1] == (retry.context.trace_id, retry.context.span_id)


def test_capture_respects_an_explicit_traceparent_and_the_off_switch(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request"):
        kept = build_spec({"n": 1}, kind="k", metadata={tracing.TRACEPARENT_KEY: explicit})
        monkeypatch.setenv(tracing.CAPTURE_ENV, "off")
        off = build_spec({"n": 1}, kind="k")
    assert kept.metadata[tracing.TRACEPARENT_KEY] == explicit
    assert tracing.TRACEPARENT_KEY not in off.metadata
    # Outside any span nothing is captured.
    monkeypatch.delenv(tracing.CAPTURE_ENV)
    assert tracing.TRACEPARENT_KEY not in build_spec({"n": 1}, kind="k").metadata
