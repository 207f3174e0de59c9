"""Outcome logs, readiness right after start, configuration warnings and job metrics on
the in-memory engine."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import timedelta

import pytest

from awa.adapters.clock import ManualClock
from awa.domain.errors import TerminalError
from awa.domain.handler_results import Snooze
from awa.runtime import AttemptContext, HandlerRegistry, metrics
from awa.runtime.config_checks import config_warnings
from awa.runtime.outcome_log import FIELD_OUTCOME
from tests.unit.test_runtime_support import enqueue, fast_config, make_engine, running, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def _outcomes(caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    return {getattr(r, FIELD_OUTCOME): r for r in caplog.records if hasattr(r, FIELD_OUTCOME)}


async def test_every_outcome_is_logged_at_its_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="awa")
    engine = make_engine()
    handlers = HandlerRegistry()

    async def ok(ctx: AttemptContext) -> None:
        return None

    async def boom(ctx: AttemptContext) -> None:
        raise RuntimeError(f"boom {ctx.record.args['n']}")

    def terminal(ctx: AttemptContext) -> None:
        raise TerminalError("no way")

    async def snooze(ctx: AttemptContext) -> Snooze | None:
        return Snooze(60) if ctx.record.attempt == 1 else None

    handlers.register("ok", ok)
    handlers.register("retry", boom)
    handlers.register("last", boom)
    handlers.register("terminal", terminal)
    handlers.register("snooze", snooze)
    config = fast_config(handlers, queues=[("default", 4)])
    async with running(engine, handlers, config):
        await enqueue(engine, "ok")
        await enqueue(engine, "retry", max_attempts=3)
        await enqueue(engine, "last", max_attempts=1)
        await enqueue(engine, "terminal")
        await enqueue(engine, "snooze")
        await enqueue(engine, "mistyped")
        expected = {"completed", "retried", "exhausted", "failed", "snoozed", "unknown_kind"}
        await wait_until(lambda: expected <= set(_outcomes(caplog)))
    seen = _outcomes(caplog)
    assert seen["completed"].levelno == logging.DEBUG
    assert seen["retried"].levelno == logging.WARNING
    # The retry's delay (attempt 1: 2 s plus up to 25 % jitter), apart from the run time.
    assert "failed and will be retried in 2 s to 2.5 s (backoff) [ran " in (
        seen["retried"].getMessage()
    )
    assert seen["snoozed"].levelno == logging.INFO
    for name in ("exhausted", "failed", "unknown_kind"):
        assert seen[name].levelno == logging.ERROR
    exhausted = seen["exhausted"]
    assert exhausted.exc_info is not None and isinstance(exhausted.exc_info[1], RuntimeError)
    assert exhausted.__dict__["kind"] == "last" and exhausted.__dict__["attempt"] == 1
    assert exhausted.__dict__["queue"] == "default" and exhausted.__dict__["duration_ms"] >= 0
    assert "RuntimeError: boom 0" in exhausted.getMessage()
    assert seen["failed"].exc_info is not None
    assert "no handler is registered" in seen["unknown_kind"].getMessage()
    assert all(r.name.startswith("awa") for r in seen.values())


async def test_job_counters_move_with_outcomes() -> None:
    instruments = metrics.instruments()
    assert instruments is not None
    engine = make_engine()
    handlers = HandlerRegistry()

    async def ok(ctx: AttemptContext) -> None:
        return None

    async def boom(ctx: AttemptContext) -> None:
        raise RuntimeError("boom")

    handlers.register("metrics_ok", ok)
    handlers.register("metrics_boom", boom)

    def total(name: str, kind: str) -> int:
        return instruments.counter_value(name, {metrics.ATTR_KIND: kind})

    before = {
        "completed": total("awa.job.completed", "metrics_ok"),
        "retried": total("awa.job.retried", "metrics_boom"),
        "failed": total("awa.job.failed", "metrics_boom"),
        "claimed": total("awa.job.claimed", "metrics_ok"),
    }
    async with running(engine, handlers):
        await enqueue(engine, "metrics_ok", 3)
        await enqueue(engine, "metrics_boom", max_attempts=1)
        await enqueue(engine, "metrics_boom", max_attempts=5)
        await wait_until(
            lambda: (
                total("awa.job.completed", "metrics_ok") == before["completed"] + 3
                and total("awa.job.failed", "metrics_boom") == before["failed"] + 1
                and total("awa.job.retried", "metrics_boom") >= before["retried"] + 1
            )
        )
    assert total("awa.job.claimed", "metrics_ok") == before["claimed"] + 3


async def test_ready_as_soon_as_start_returns_and_not_after_stop() -> None:
    engine = make_engine()
    handlers = HandlerRegistry()

    async def ok(ctx: AttemptContext) -> None:
        return None

    handlers.register("ok", ok)
    async with running(engine, handlers) as runtime:
        assert runtime.health().poll_loop_alive
        ready = runtime.readiness()
        assert ready == {
            "poll_loop_alive": True,
            "heartbeat_alive": True,
            "maintenance_alive": True,
            "shutting_down": False,
        }
        runtime.request_stop()
        assert runtime.health().shutting_down
        assert runtime.readiness()["shutting_down"] is True


async def test_start_line_and_staleness_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="awa")
    engine = make_engine()
    handlers = HandlerRegistry()

    async def ok(ctx: AttemptContext) -> None:
        return None

    handlers.register("send_email", ok, queue="email")
    config = fast_config(
        handlers,
        queues=[("email", 3)],
        heartbeat_interval_ms=10_000,
        heartbeat_staleness_ms=20_000,
    )
    async with running(engine, handlers, config):
        pass
    messages = [r.getMessage() for r in caplog.records]
    assert any("started; queues: email(3); kinds: send_email" in m for m in messages)
    warning = next(r for r in caplog.records if "heartbeat_staleness_ms" in r.getMessage())
    assert warning.levelno == logging.WARNING
    assert "at least 30000" in warning.getMessage()


def test_config_warnings() -> None:
    handlers = HandlerRegistry()
    handlers.register("k", lambda ctx: None, queue="a")
    fine = fast_config(handlers, queues=[("a", 2)], heartbeat_interval_ms=30_000)
    assert config_warnings(fine, max_connections=10) == []
    short_deadline = fast_config(
        handlers,
        queues=[{"name": "a", "max_workers": 2, "deadline_duration_ms": 1000}],
        heartbeat_interval_ms=5000,
        heartbeat_staleness_ms=15_000,
    )
    (deadline,) = config_warnings(short_deadline)
    assert "queue a: deadline_duration_ms (1000)" in deadline
    pool = config_warnings(fine, max_connections=3)
    assert len(pool) == 1 and "max_connections=5" in pool[0]


def test_importing_awa_configures_no_logging() -> None:
    code = (
        "import logging, awa, awa.runtime, awa.entrypoints.cli\n"
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers\n"
        "assert logging.getLogger('awa').handlers == []\n"
        "assert logging.getLogger('awa').level == logging.NOTSET\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_queue_gauges_report_depth_lag_and_dlq_from_queue_counts() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

    from awa.runtime.queue_gauges import QueueGauges

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    instruments = metrics.Instruments(provider.get_meter("awa"))
    clock = ManualClock()
    engine = make_engine(clock)
    await enqueue(engine, "k", 3, queue="mail")
    clock.advance(timedelta(seconds=42))
    gauges = QueueGauges(engine, instruments, clock=clock)
    gauges.attach()
    await gauges.refresh()

    def points(name: str) -> dict[tuple[tuple[str, object], ...], float]:
        data = reader.get_metrics_data()
        found: dict[tuple[tuple[str, object], ...], float] = {}
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        for p in metric.data.data_points:
                            assert isinstance(p, NumberDataPoint)
                            found[tuple(sorted((p.attributes or {}).items()))] = p.value
        return found

    depth = points("awa.queue.depth")
    assert depth[(("awa.job.queue", "mail"), ("awa.job.state", "available"))] == 3
    assert points("awa.queue.lag")[(("awa.job.queue", "mail"),)] >= 0
    gauges.detach()
    assert points("awa.queue.depth") == {}
