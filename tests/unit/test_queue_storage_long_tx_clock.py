"""The leader's look at long transactions keeps its cadence and its warning throttle on
the engine's clock (ADR 0025): a manual clock decides when the horizon is looked at again
and when a blocking session is named again."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.long_tx import WARN_EVERY, LongTransactions
from awa.adapters.postgres_queue_storage.statements import Statements

pytestmark = pytest.mark.anyio

_HOLDER = {
    "pid": 4242,
    "state": "idle in transaction",
    "application_name": "psql",
    "xact_start": datetime(2029, 12, 31, tzinfo=UTC),
    "xid": 7,
    "xmin": 7,
    "query": "SELECT 1",
}


class _Connections:
    @asynccontextmanager
    async def conn(self) -> AsyncIterator[object]:
        yield object()


class _Statements:
    """Answers every statement by name; ``horizon_holder`` with the holder while held."""

    schema = "qs_clock"
    quoted_schema = '"qs_clock"'

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.holder: dict[str, Any] | None = _HOLDER

    def __getitem__(self, name: str) -> str:
        return name

    async def rows(self, conn: object, statement: str, params: object) -> list[Any]:
        self.asked.append(statement)
        if statement == "horizon_holder":
            return [] if self.holder is None else [self.holder]
        return []


def _long_transactions(clock: ManualClock) -> tuple[LongTransactions, _Statements]:
    statements = _Statements()
    long_tx = LongTransactions(
        cast(Connections, _Connections()), cast(Statements, statements), clock
    )
    long_tx.long_transaction_after = timedelta(0)
    return long_tx, statements


async def test_the_horizon_is_looked_at_every_interval_of_the_clock() -> None:
    clock = ManualClock()
    long_tx, statements = _long_transactions(clock)
    long_tx.horizon_check_every = 10.0
    await long_tx.watch_horizon()
    assert statements.asked.count("horizon_holder") == 1
    clock.advance(9.9)
    await long_tx.watch_horizon()
    assert statements.asked.count("horizon_holder") == 1
    clock.advance(0.1)
    await long_tx.watch_horizon()
    assert statements.asked.count("horizon_holder") == 2


async def test_a_horizon_holder_is_named_again_once_a_warning_interval_of_the_clock_passed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    long_tx, _ = _long_transactions(clock)
    long_tx.horizon_check_every = 0.0

    def warnings() -> int:
        return sum(
            "holds the xmin horizon" in r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING
        )

    with caplog.at_level(logging.WARNING, logger="awa.adapters.postgres_queue_storage"):
        await long_tx.watch_horizon()
        assert warnings() == 1
        clock.advance(WARN_EVERY - 1)
        await long_tx.watch_horizon()
        assert warnings() == 1
        clock.advance(1)
        await long_tx.watch_horizon()
        assert warnings() == 2
