"""The pytest plugin of ``awa.testing`` (registered through the ``pytest11`` entry point).

Fixtures (async ones run under ``anyio``: mark tests ``@pytest.mark.anyio``):

- ``awa_database_url``: a migrated throw-away database, dropped after the test; with
  ``--awa-database-url URL`` that existing database is used instead (never dropped);
- ``awa_client``: an :class:`~awa.testing.AwaTestClient` on ``awa_database_url``;
- ``awa_app``: the application's own client, whose handlers ``awa_memory_client`` runs:
  ``None`` unless the ini option ``awa_app = package.module:client`` names it (an
  ``AsyncClient``, or a function taking no argument that returns one) or a ``conftest.py``
  overrides the fixture;
- ``awa_memory_client``: an :class:`~awa.testing.AwaTestClient` on the in-memory engine
  with ``awa_app``'s handlers, for tests that need no Postgres.
"""

from __future__ import annotations

import importlib
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
    parser.addini(
        APP_INI,
        "The application's client for the awa_memory_client fixture, as module:attribute "
        "(an awa.AsyncClient, or a function taking no argument that returns one).",
        default="",
    )


APP_INI = "awa_app"


def load_app(spec: str) -> AsyncClient:
    """The client named by ``module:attribute`` (an ``AsyncClient`` or a function taking
    no argument that returns one); a clear ``pytest.UsageError`` otherwise."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise pytest.UsageError(
            f"ini option {APP_INI} = {spec!r}: expected module:attribute, e.g. myapp.tasks:client"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise pytest.UsageError(
            f"ini option {APP_INI}: cannot import {module_name!r}: {exc}"
        ) from None
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise pytest.UsageError(
            f"ini option {APP_INI}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if callable(value) and not isinstance(value, AsyncClient):
        value = value()
    if not isinstance(value, AsyncClient):
        raise pytest.UsageError(
            f"ini option {APP_INI}: {spec} must be an awa.AsyncClient or return one, "
            f"got {type(value).__name__}"
        )
    return value


@pytest.fixture
async def awa_database_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A migrated database for one test: throw-away unless ``--awa-database-url``
    (its sessions end after the test; the drop goes on in the background)."""
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
        await drop_database(url, wait=False)


@pytest.fixture
async def awa_client(awa_database_url: str) -> AsyncIterator[AwaTestClient]:
    """An :class:`AwaTestClient` on ``awa_database_url``."""
    client = AsyncClient(awa_database_url)
    try:
        yield AwaTestClient(client)
    finally:
        await client.close()


@pytest.fixture
def awa_app(request: pytest.FixtureRequest) -> AsyncClient | None:
    """The application's client whose handlers ``awa_memory_client`` runs: the one the
    ini option ``awa_app`` names, else ``None``. Override this fixture in a
    ``conftest.py`` to build it yourself (constructing a client opens no connection)."""
    spec = str(request.config.getini(APP_INI) or "").strip()
    return load_app(spec) if spec else None


@pytest.fixture
def awa_memory_client(awa_app: AsyncClient | None) -> Iterator[AwaTestClient]:
    """An :class:`AwaTestClient` on a fresh in-memory engine, running the handlers
    registered on ``awa_app`` (none when it is ``None``)."""
    yield AwaTestClient(memory_client(handlers_from=awa_app))
