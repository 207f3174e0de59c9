"""psycopg's warnings about a connection cut off by a task's cancellation are demoted to
DEBUG, and so shown only where psycopg's logger has DEBUG enabled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from awa.adapters._pg import pool


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def psycopg_records() -> Iterator[_Records]:
    logger = logging.getLogger("psycopg")
    handler = _Records()
    level = logger.level
    pool._quiet_cancellation_noise()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _warn_while(cancelled: bool) -> None:
    async def warn() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            logging.getLogger("psycopg").warning("query cancellation interrupted")

    async def main() -> None:
        if not cancelled:
            logging.getLogger("psycopg").warning("query cancellation interrupted")
            return
        task = asyncio.create_task(warn())
        await asyncio.sleep(0)  # let it start waiting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_warning_from_a_cancelled_task_is_dropped_at_psycopgs_default_level(
    psycopg_records: _Records,
) -> None:
    logging.getLogger("psycopg").setLevel(logging.WARNING)
    _warn_while(cancelled=True)
    assert psycopg_records.records == []


def test_a_warning_from_a_cancelled_task_shows_as_debug_where_debug_is_on(
    psycopg_records: _Records,
) -> None:
    logging.getLogger("psycopg").setLevel(logging.DEBUG)
    _warn_while(cancelled=True)
    assert [(r.levelname, r.getMessage()) for r in psycopg_records.records] == [
        ("DEBUG", "query cancellation interrupted")
    ]


def test_a_warning_outside_a_cancellation_keeps_its_level(psycopg_records: _Records) -> None:
    logging.getLogger("psycopg").setLevel(logging.WARNING)
    _warn_while(cancelled=False)
    assert [r.levelname for r in psycopg_records.records] == ["WARNING"]
