"""The pytest plugin of ``awa.testing`` (registered through the ``pytest11`` entry point).

Fixtures (async ones run under ``anyio``: mark tests ``@pytest.mark.anyio``):

- ``awa_database_url``: a migrated throw-away database, dropped after the test; with
  ``--awa-database-url URL`` that existing database is used instead (never dropped);
- ``awa_client``: an :class:`~awa.testing.AwaTestClient` on ``awa_database_url``;
- ``awa_memory_client``: an :class:`~awa.testing.AwaTestClient` on the in-memory engine,
  for tests that need no Postgres.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from awa.entrypoints.client_async import AsyncClient
from awa.testing._client import AwaTestClient
from awa.testing._database import create_database, drop_database
from awa.testing._memory import memory_client


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("awa")
    group.addoption(
        "--awa-database-url",
        default=None,
        metavar="URL",
        help="Use this existing database for the awa fixtures instead of a throw-away one "
        "(it is migrated, and emptied by AwaTestClient.clean()).",
    )


@pytest.fixture
async def awa_database_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A migrated database for one test: throw-away unless ``--awa-database-url``."""
    explicit = request.config.getoption("--awa-database-url", None)
    if explicit:
        from awa.entrypoints import bootstrap

        await bootstrap.migrate(explicit)
        yield explicit
        return
    url = await create_database()
    try:
        yield url
    finally:
        await drop_database(url)


@pytest.fixture
async def awa_client(awa_database_url: str) -> AsyncIterator[AwaTestClient]:
    """An :class:`AwaTestClient` on ``awa_database_url``."""
    client = AsyncClient(awa_database_url)
    try:
        yield AwaTestClient(client)
    finally:
        await client.close()


@pytest.fixture
def awa_memory_client() -> Iterator[AwaTestClient]:
    """An :class:`AwaTestClient` on a fresh in-memory engine."""
    yield AwaTestClient(memory_client())
