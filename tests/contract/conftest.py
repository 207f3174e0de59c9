"""The ``engine`` fixture: one fresh engine per test, parametrized over every registered
engine. Only engines that need Postgres pull in the ``database_url`` fixture, so the
in-memory runs never touch a server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.engines import ENGINES, EngineHandle, open_engine


def _engine_params() -> list[object]:
    return [
        pytest.param(name, marks=[pytest.mark.postgres] if entry.needs_database else [])
        for name, entry in sorted(ENGINES.items())
    ]


@pytest.fixture(params=_engine_params())
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[EngineHandle]:
    name: str = request.param
    url: str | None = None
    if ENGINES[name].needs_database:
        url = request.getfixturevalue("database_url")
    async with open_engine(name, url) as handle:
        yield handle
