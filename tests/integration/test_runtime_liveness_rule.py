"""One rule for when a worker runtime counts as live: ``awa.domain.runtimes.is_live``
and SQL ``awa.runtime_is_live`` answer the same over a table of cases (snapshot age
either side of the window's edges, short and long snapshot intervals, shutting down or
not). A runtime that announced its shutdown is not live, however fresh its snapshot."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from awa.domain.runtimes import MIN_LIVE_WINDOW, is_live, live_window

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)

#: Snapshot intervals: none shorter than the floor's third, at the floor's, and longer.
INTERVALS_MS = (0, 1_000, 10_000, 20_000, 45_000)
#: Ages around each interval's window: well inside, a microsecond either side, at it.
AGE_OFFSETS = (
    None,
    -timedelta(seconds=1),
    -timedelta(microseconds=1),
    timedelta(0),
    timedelta(microseconds=1),
)


def cases() -> list[tuple[int, timedelta, bool]]:
    out = []
    for interval, offset, shutting_down in itertools.product(
        INTERVALS_MS, AGE_OFFSETS, (False, True)
    ):
        age = timedelta(0) if offset is None else live_window(interval) + offset
        out.append((interval, age, shutting_down))
    return out


def test_python_and_sql_agree_on_every_case(migrated_database_url: str) -> None:
    table = cases()
    with psycopg.connect(migrated_database_url) as conn:
        for interval, age, shutting_down in table:
            row = conn.execute(
                "SELECT now(), awa.runtime_is_live(now() - %s::interval, %s, %s)",
                (age, interval, shutting_down),
            ).fetchone()
            assert row is not None
            now, sql_live = row
            python_live = is_live(now - age, interval, now, shutting_down=shutting_down)
            assert python_live == sql_live, (interval, age, shutting_down, sql_live)
    answers = {
        is_live(NOW - age, interval, NOW, shutting_down=down) for interval, age, down in table
    }
    assert answers == {True, False}


def test_a_runtime_shutting_down_is_not_live_however_fresh() -> None:
    assert is_live(NOW, 1_000, NOW, shutting_down=False)
    assert not is_live(NOW, 1_000, NOW, shutting_down=True)
    assert not is_live(NOW - MIN_LIVE_WINDOW, 1_000, NOW, shutting_down=False)
