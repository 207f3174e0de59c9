"""Shared fixtures.

``pg_server_url``: a Postgres server for the whole session.
``database_url``: a fresh, empty database on that server for one test.
``anyio_backend``: async tests run on asyncio (use ``@pytest.mark.anyio``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def database_url(pg_server_url: str) -> Iterator[str]:
    name = f"awa_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_server_url.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
