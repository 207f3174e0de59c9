"""Repeated failures of a loop log one warning per cause, counted repeats and one recovery
line: the rule in awa.runtime.log_throttle, and a dispatcher whose claims keep failing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

import anyio
import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.errors import DatabaseError
from awa.domain.job import Claim, RunLease
from awa.domain.policies import NO_JITTER
from awa.domain.rate_limits import GlobalRateLimit
from awa.ports.storage import Ack
from awa.runtime.completion import CompletionBatcher
from awa.runtime.config import QueueConfig
from awa.runtime.context import AttemptContext
from awa.runtime.dispatcher import QueueDispatcher
from awa.runtime.heartbeat import HeartbeatService
from awa.runtime.inflight import InFlight
from awa.runtime.log_throttle import WINDOW_SECONDS, FailureLog, classify
from awa.runtime.permits import PermitPool
from tests.unit.test_runtime_support import enqueue

LOGGER = "awa.test.log_throttle"


class _Clock:
    """Monotonic seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _SqlstateError(Exception):
    """What a driver error looks like to the runtime: a message and a ``sqlstate``."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _refused() -> DatabaseError:
    """The domain error the adapters raise when nothing listens on the port."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as exc:
            raise DatabaseError(f"database connection failed: {exc}") from exc
    except DatabaseError as error:
        return error


def _split(records: list[logging.LogRecord]) -> tuple[int, int, int, int]:
    """(first-of-kind warnings with a traceback, summaries, recoveries, other records)."""
    first = sum(1 for r in records if r.levelno == logging.WARNING and r.exc_info)
    summaries = sum(1 for r in records if "more " in r.getMessage() and not r.exc_info)
    recoveries = sum(
        1 for r in records if r.levelno == logging.INFO and "recovered" in r.getMessage()
    )
    return first, summaries, recoveries, len(records) - first - summaries - recoveries


def _records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


def test_a_burst_inside_one_window_logs_one_warning_and_one_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = _Clock()
    failures = FailureLog(logging.getLogger(LOGGER), "claim", prefix="queue q: ", clock=clock)
    for _ in range(100):
        failures.failed(_refused())
        clock.now += 0.2  # the default poll interval: 20 s in all
    failures.succeeded()
    records = _records(caplog, LOGGER)
    assert _split(records) == (1, 0, 1, 0)
    warning, recovery = records
    assert "queue q: claim failed" in warning.getMessage()
    assert "connection refused" in warning.getMessage()
    assert "DATABASE_URL" in warning.getMessage()
    assert recovery.getMessage() == "queue q: claim recovered after 100 failures over 20.0 s"
    # A success with nothing failing before it says nothing.
    failures.succeeded()
    assert len(_records(caplog, LOGGER)) == 2


def test_a_burst_over_several_windows_logs_one_summary_per_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = _Clock()
    failures = FailureLog(logging.getLogger(LOGGER), "claim", clock=clock)
    for _ in range(100):
        failures.failed(_refused())
        clock.now += 1.0  # 100 s: the window passes three times
    failures.succeeded()
    records = _records(caplog, LOGGER)
    assert _split(records) == (1, 3, 1, 0)
    summaries = [r.getMessage() for r in records if "more " in r.getMessage()]
    assert summaries[0] == (
        f"30 more claim failures (same cause: connection refused) in the last "
        f"{WINDOW_SECONDS:.0f} s"
    )
    assert all(r.levelno == logging.WARNING for r in records if "more " in r.getMessage())


def test_each_cause_warns_once_and_a_recovery_starts_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = _Clock()
    failures = FailureLog(logging.getLogger(LOGGER), "heartbeat", clock=clock)
    too_many = _SqlstateError("FATAL: sorry, too many clients already", "53300")
    for _ in range(10):
        failures.failed(_refused())
        failures.failed(too_many)
    assert _split(_records(caplog, LOGGER)) == (2, 0, 0, 0)
    failures.succeeded()
    failures.failed(_refused())  # a new outage is reported again, traceback and all
    assert _split(_records(caplog, LOGGER)) == (3, 0, 1, 0)


@pytest.mark.parametrize(
    ("exc", "cause", "hint"),
    [
        (ConnectionRefusedError(111, "Connection refused"), "connection refused", "DATABASE_URL"),
        (_SqlstateError("too many", "53300"), "too many connections", "max_connections"),
        (
            DatabaseError("database connection failed: FATAL: sorry, too many clients already"),
            "too many connections",
            "max_connections",
        ),
        (
            DatabaseError(
                "database connection failed: ERROR: no more connections allowed (max_client_conn)"
            ),
            "pooler refused",
            "max_client_conn",
        ),
        (
            DatabaseError("connection pool unavailable: couldn't get a connection after 30 sec"),
            "pool exhausted",
            "pool size",
        ),
        (_SqlstateError("terminating", "57P01"), "connection terminated", "pg_terminate_backend"),
        (_SqlstateError("lost", "08006"), "connection failure", "DATABASE_URL"),
        (_SqlstateError("deadlock", "40P01"), "SQLSTATE 40P01", None),
        (ValueError("a bug"), "other", None),
    ],
)
def test_causes_are_classified_by_sqlstate_then_message(
    exc: BaseException, cause: str, hint: str | None
) -> None:
    kind = classify(exc)
    assert kind.cause == cause
    if hint is None:
        assert kind.hint is None
    else:
        assert kind.hint is not None and hint in kind.hint


def test_the_sqlstate_is_found_on_the_error_a_domain_error_was_raised_from() -> None:
    try:
        try:
            raise _SqlstateError("FATAL: too many connections for role", "53300")
        except _SqlstateError as exc:
            raise DatabaseError("database error (53300)") from exc
    except DatabaseError as error:
        kind = classify(error)
    assert (kind.type_name, kind.sqlstate, kind.cause) == (
        "DatabaseError",
        "53300",
        "too many connections",
    )


class _UnreachableEngine(InMemoryEngine):
    """The in-memory engine behind a database that refuses ``outage`` claims first."""

    outage = 100

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
        if self.outage > 0:
            self.outage -= 1
            raise _refused()
        return await super().claim(
            queue,
            limit=limit,
            deadline=deadline,
            aging_interval=aging_interval,
            max_running_per_key=max_running_per_key,
            global_rate_limit=global_rate_limit,
            global_rate_limit_per_key=global_rate_limit_per_key,
        )


@pytest.mark.anyio
async def test_a_dispatcher_whose_claims_keep_failing_logs_one_warning_a_summary_and_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awa.runtime.dispatcher")
    clock = ManualClock()
    engine = _UnreachableEngine(clock=clock, backoff=NO_JITTER)
    await enqueue(engine, "send", queue="q")
    config = QueueConfig(name="q", max_workers=4)
    spawned: list[Claim] = []
    dispatcher = QueueDispatcher(
        config,
        engine,
        PermitPool([config], None),
        poll_interval=0.0,
        spawn=lambda _queue, claim: spawned.append(claim),
        override_refresh=3600.0,
        clock=clock,
    )
    waker = dispatcher._wakers[0]
    for _ in range(100):
        await dispatcher._iteration(waker)
        assert not dispatcher.last_claim_ok
        clock.advance(0.5)  # 50 s of outage: one window passes
    await dispatcher._iteration(waker)
    assert dispatcher.last_claim_ok and len(spawned) == 1
    records = _records(caplog, "awa.runtime.dispatcher")
    assert _split(records) == (1, 1, 1, 0)
    assert records[1].getMessage().startswith("queue q: 60 more claim failures")
    assert records[2].getMessage() == "queue q: claim recovered after 100 failures over 50.0 s"
    # The permits a failed claim reserved all came back.
    assert dispatcher._permits.in_flight("q") == 1


class _UnreachableOnComplete(InMemoryEngine):
    """The in-memory engine behind a database that refuses ``outage`` completions first."""

    outage = 100

    async def complete(self, leases: Sequence[RunLease]) -> list[Ack]:
        if self.outage > 0:
            self.outage -= 1
            raise _refused()
        return await super().complete(leases)


@pytest.mark.anyio
async def test_a_completion_flush_that_keeps_failing_logs_one_warning_and_one_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awa.runtime.completion")
    engine = _UnreachableOnComplete(clock=ManualClock(), backoff=NO_JITTER)
    await enqueue(engine, "send", queue="q")
    [claim] = await engine.claim("q", limit=1)
    batcher = CompletionBatcher(
        engine, clock=engine._clock, flush_interval=0.0, retry_delay=0.0, max_retry_delay=0.0
    )
    async with anyio.create_task_group() as flusher:
        flusher.start_soon(batcher.run)
        assert await batcher.complete(claim.lease) is Ack.APPLIED
        flusher.cancel_scope.cancel()
    records = _records(caplog, "awa.runtime.completion")
    assert _split(records) == (1, 0, 1, 0)
    assert "for 1 attempts; retrying" in records[0].getMessage()
    assert records[1].getMessage().startswith("completion flush recovered after 100 failures")


class _UnreachableOnHeartbeat(InMemoryEngine):
    """The in-memory engine behind a database that refuses ``outage`` heartbeats first."""

    outage = 100

    async def heartbeat(self, leases: Sequence[RunLease]) -> list[Ack]:
        if self.outage > 0:
            self.outage -= 1
            raise _refused()
        return await super().heartbeat(leases)


@pytest.mark.anyio
async def test_heartbeats_that_keep_failing_log_one_warning_and_one_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awa.runtime.heartbeat")
    engine = _UnreachableOnHeartbeat(clock=ManualClock(), backoff=NO_JITTER)
    await enqueue(engine, "send", queue="q")
    [claim] = await engine.claim("q", limit=1)
    inflight = InFlight()
    inflight.add(AttemptContext(engine, claim, queue="q", clock=engine._clock))
    service = HeartbeatService(engine, inflight, clock=engine._clock, interval=1.0)
    for _ in range(100):
        await service.beat()
    assert service.ticks == 0
    await service.beat()
    assert service.ticks == 1
    records = _records(caplog, "awa.runtime.heartbeat")
    assert _split(records) == (1, 0, 1, 0)
    assert "heartbeat failed (DatabaseError: connection refused) for 1 attempts" in (
        records[0].getMessage()
    )
    assert records[1].getMessage().startswith("heartbeat recovered after 100 failures")
